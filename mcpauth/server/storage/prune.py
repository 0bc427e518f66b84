"""Expiry of short-lived state: for each table, which rows are dead, deleted in small batches
(short transactions: never a long lock) by one pruner at a time (a PostgreSQL advisory lock;
every batch is idempotent anyway, so replicas that race do no double work).

What is dead:

- authorization codes one code lifetime after they expired (a replay inside that margin still
  revokes its grant); interactions, signed-in browser sessions and pending upstream sign-ins
  once expired;
- refresh-token families whose grant was revoked or outlived ``refresh_token_ttl`` (reuse
  detection keeps working until then), then those grants;
- revoked access-token ids and used assertion ids after their expiry;
- rate counters and throttle rows after their window (and any lock) has passed;
- consents whose client or user is gone, upstream identities whose user is gone;
- self-registered clients (dynamic registration, metadata documents) older than
  ``self_registered_client_unused_ttl`` with no grant used within
  ``self_registered_client_idle_ttl`` (admin-registered clients never expire), then their
  grants and refresh tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Table, and_, delete, exists, or_, select, text, tuple_
from sqlalchemy.sql.elements import ColumnElement

from mcpauth.server.config import Settings
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.models import (
    AuthorizationCode,
    BrowserSessionRecord,
    Client,
    Consent,
    Grant,
    Interaction,
    RateCounter,
    RefreshToken,
    RevokedAccessToken,
    Throttle,
    UpstreamIdentity,
    UpstreamLogin,
    UsedAssertion,
    User,
)

log = logging.getLogger("mcpauth.prune")

BATCH = 1000
MAX_BATCHES = 1000  # per table and run: a run ends, the next one continues
ADVISORY_LOCK = 0x6D6370617574  # "mcpaut": one pruner at a time on PostgreSQL
RATE_WINDOW = 60
THROTTLE_WINDOW = 3600  # the longest failure window or lock


def _table(model: type) -> Table:
    table: Table = model.__table__  # type: ignore[attr-defined]
    return table


CODES = _table(AuthorizationCode)
INTERACTIONS = _table(Interaction)
SESSIONS = _table(BrowserSessionRecord)
REFRESH = _table(RefreshToken)
GRANTS = _table(Grant)
REVOKED = _table(RevokedAccessToken)
ASSERTIONS = _table(UsedAssertion)
RATES = _table(RateCounter)
THROTTLES = _table(Throttle)
CONSENTS = _table(Consent)
CLIENTS = _table(Client)
USERS = _table(User)
UPSTREAM_LOGINS = _table(UpstreamLogin)
UPSTREAM_IDENTITIES = _table(UpstreamIdentity)


def _dead_grant(settings: Settings, now: int) -> ColumnElement[bool]:
    return or_(
        GRANTS.c.revoked_at.is_not(None),
        GRANTS.c.created_at + settings.refresh_token_ttl < now,
        ~exists().where(CLIENTS.c.client_id == GRANTS.c.client_id),
    )


def _unused_client(settings: Settings, now: int) -> ColumnElement[bool]:
    used_lately = exists().where(
        GRANTS.c.client_id == CLIENTS.c.client_id,
        GRANTS.c.revoked_at.is_(None),
        GRANTS.c.last_used_at + settings.self_registered_client_idle_ttl >= now,
    )
    return and_(
        CLIENTS.c.source.in_(("dcr", "cimd")),
        CLIENTS.c.created_at + settings.self_registered_client_unused_ttl < now,
        ~used_lately,
    )


@dataclass(frozen=True)
class Rule:
    """Rows of ``table`` that are dead at ``now``."""

    name: str
    table: Table
    dead: Callable[[Settings, int], ColumnElement[bool]]


RULES = (
    Rule("clients", CLIENTS, _unused_client),  # first: their grants die in the same run
    Rule(
        "authorization_codes",
        CODES,
        lambda s, now: CODES.c.expires_at + s.authorization_code_ttl < now,
    ),
    Rule("interactions", INTERACTIONS, lambda s, now: INTERACTIONS.c.expires_at < now),
    Rule("browser_sessions", SESSIONS, lambda s, now: SESSIONS.c.expires_at < now),
    Rule("upstream_logins", UPSTREAM_LOGINS, lambda s, now: UPSTREAM_LOGINS.c.expires_at < now),
    Rule(
        "refresh_tokens",
        REFRESH,
        lambda s, now: exists().where(GRANTS.c.id == REFRESH.c.grant_id, _dead_grant(s, now)),
    ),
    # a dead grant goes once its family and codes are gone
    Rule(
        "grants",
        GRANTS,
        lambda s, now: and_(
            _dead_grant(s, now),
            ~exists().where(REFRESH.c.grant_id == GRANTS.c.id),
            ~exists().where(CODES.c.grant_id == GRANTS.c.id),
        ),
    ),
    Rule("revoked_access_tokens", REVOKED, lambda s, now: REVOKED.c.expires_at < now),
    Rule("used_assertions", ASSERTIONS, lambda s, now: ASSERTIONS.c.expires_at < now),
    Rule("rate_counters", RATES, lambda s, now: RATES.c.window_start + 2 * RATE_WINDOW < now),
    Rule(
        "throttles",
        THROTTLES,
        lambda s, now: and_(
            THROTTLES.c.locked_until < now, THROTTLES.c.window_start + THROTTLE_WINDOW < now
        ),
    ),
    Rule(
        "consents",
        CONSENTS,
        lambda s, now: or_(
            ~exists().where(CLIENTS.c.client_id == CONSENTS.c.client_id),
            ~exists().where(USERS.c.id == CONSENTS.c.user_id),
        ),
    ),
    Rule(
        "upstream_identities",
        UPSTREAM_IDENTITIES,
        lambda s, now: ~exists().where(USERS.c.id == UPSTREAM_IDENTITIES.c.user_id),
    ),
)


def _delete_batch(conn: Connection, rule: Rule, settings: Settings, now: int) -> int:
    keys = list(rule.table.primary_key.columns)
    chosen = select(*keys).where(rule.dead(settings, now)).limit(BATCH)
    target = keys[0] if len(keys) == 1 else tuple_(*keys)
    result = conn.execute(delete(rule.table).where(target.in_(chosen)))
    return int(result.rowcount or 0)


def _prune_table(db: Database, rule: Rule, settings: Settings, now: int) -> int:
    total = 0
    for _ in range(MAX_BATCHES):
        with db.transaction() as conn:
            deleted = _delete_batch(conn, rule, settings, now)
        total += deleted
        if deleted < BATCH:
            break
    return total


def prune(db: Database, settings: Settings, now: int) -> dict[str, int] | None:
    """Delete every dead row, table by table, in batches; the rows deleted per table, or None
    when another replica holds the pruner's lock (PostgreSQL)."""
    if db.engine.dialect.name != "postgresql":
        return {rule.name: _prune_table(db, rule, settings, now) for rule in RULES}
    with db.engine.connect() as lock_conn:
        locked = lock_conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ADVISORY_LOCK})
        if not locked.scalar():
            return None
        try:
            return {rule.name: _prune_table(db, rule, settings, now) for rule in RULES}
        finally:
            lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_LOCK})
            lock_conn.commit()


def report(counts: dict[str, int] | None) -> None:
    if counts is None:
        log.info("prune skipped: another replica is pruning")
        return
    log.info(
        "pruned %d rows: %s",
        sum(counts.values()),
        " ".join(f"{table}={rows}" for table, rows in counts.items()),
    )
