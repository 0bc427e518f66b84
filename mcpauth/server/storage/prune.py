"""Expiry of short-lived state: for each table, which rows are dead, deleted in small batches
(each found in key order by a read, then deleted by key in a short transaction: never a long
lock) by one pruner at a time (a PostgreSQL advisory lock; every batch is idempotent anyway, so
replicas that race do no double work).

What is dead:

- authorization codes and device authorizations one lifetime after they expired (a replay
  inside that margin still revokes its grant); interactions, signed-in browser sessions and
  pending upstream sign-ins once expired;
- refresh-token families whose grant was revoked or outlived ``refresh_token_ttl`` (reuse
  detection keeps working until then), then those grants;
- revoked access-token ids and used assertion ids after their expiry;
- rate counters and throttle rows after their window (and any lock) has passed;
- consents whose client or user is gone, upstream identities whose user is gone;
- audit events older than ``audit_retention``;
- self-registered clients (dynamic registration, metadata documents) older than
  ``self_registered_client_unused_ttl`` with no grant used within
  ``self_registered_client_idle_ttl`` (admin-registered clients never expire), then their
  grants and refresh tokens. :func:`client_expires_at` says when that may happen, for the
  ``client_secret_expires_at`` a self-registered client is told (RFC 7591 §3.2.1).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Table,
    and_,
    case,
    delete,
    exists,
    func,
    or_,
    select,
    text,
    tuple_,
)
from sqlalchemy.sql.elements import ColumnElement

from mcpauth.server.config import Settings
from mcpauth.server.storage.database import Database, Session
from mcpauth.server.storage.models import (
    AuditEvent,
    AuthorizationCode,
    BrowserSessionRecord,
    Client,
    Consent,
    DeviceAuthorization,
    Grant,
    Interaction,
    PendingSignIn,
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
COUNT_LIMIT = 100_000  # rows a PostgreSQL table count reads; beyond, the planner's estimate
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
DEVICES = _table(DeviceAuthorization)
PENDING_SIGN_INS = _table(PendingSignIn)
AUDIT_EVENTS = _table(AuditEvent)


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


def client_expires_at(session: Session, settings: Settings, client: Client) -> int:
    """The earliest time the pruner may delete ``client``; 0 if it never will (registered by
    the operator). Until the client has a grant, the end of its unused period; each grant it
    uses keeps it until ``self_registered_client_idle_ttl`` after the grant's last use, and no
    longer than the grant itself lives (``refresh_token_ttl``: a dead grant is deleted, and
    with it the evidence of use). A user revoking the client's grants ends that sooner."""
    if client.source not in ("dcr", "cimd"):
        return client.secret_expires_at
    kept_by_use = case(
        (
            GRANTS.c.last_used_at + settings.self_registered_client_idle_ttl
            < GRANTS.c.created_at + settings.refresh_token_ttl,
            GRANTS.c.last_used_at + settings.self_registered_client_idle_ttl,
        ),
        else_=GRANTS.c.created_at + settings.refresh_token_ttl,
    )
    latest = (
        session.connection()
        .execute(
            select(func.max(kept_by_use)).where(
                GRANTS.c.client_id == client.client_id, GRANTS.c.revoked_at.is_(None)
            )
        )
        .scalar()
    )
    unused_until = client.created_at + settings.self_registered_client_unused_ttl
    return max(unused_until, int(latest or 0))


@dataclass(frozen=True)
class Parent:
    """Where a rule's rows are found from: the dead rows of another table (their ``key``, and
    the column of the rule's table that refers to it), so the search passes over the parent
    table and reaches the rows through an index instead of testing every row."""

    key: Column[Any]
    dead: Callable[[Settings, int], ColumnElement[bool]]
    referred_by: Column[Any]


@dataclass(frozen=True)
class Rule:
    """Rows of ``table`` that are dead at ``now``."""

    name: str
    table: Table
    dead: Callable[[Settings, int], ColumnElement[bool]]
    parent: Parent | None = None


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
    # kept one lifetime past expiry, as codes are: a late poll hears expired_token, a replay
    # of a redeemed code still revokes its grant
    Rule(
        "device_authorizations",
        DEVICES,
        lambda s, now: DEVICES.c.expires_at + s.device_code_ttl < now,
    ),
    Rule("pending_sign_ins", PENDING_SIGN_INS, lambda s, now: PENDING_SIGN_INS.c.expires_at < now),
    Rule(
        "refresh_tokens",
        REFRESH,
        lambda s, now: exists().where(GRANTS.c.id == REFRESH.c.grant_id, _dead_grant(s, now)),
        # a million live tokens tested one by one took most of a run: found from dead grants
        Parent(GRANTS.c.id, _dead_grant, REFRESH.c.grant_id),
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
    Rule("audit_events", AUDIT_EVENTS, lambda s, now: AUDIT_EVENTS.c.at + s.audit_retention < now),
)


Key = tuple[Any, ...]


def _next_keys(db: Database, keys: list[Column[Any]], where: Any, after: Key | None) -> list[Key]:
    """Up to BATCH keys of the rows ``where`` selects after ``after``, in key order, read
    without the write lock."""
    key = keys[0] if len(keys) == 1 else tuple_(*keys)
    query = select(*keys).where(where)
    if after is not None:
        query = query.where(key > (after[0] if len(keys) == 1 else tuple_(*after)))
    with db.read() as session:
        rows = session.connection().execute(query.order_by(*keys).limit(BATCH))
        return [tuple(row) for row in rows]


def _dead_keys(
    db: Database, rule: Rule, settings: Settings, now: int, after: Key | None
) -> list[Key]:
    """The next batch of dead rows' keys after ``after``, in key order, read without the write
    lock: the search (a scan where the rule has no index) never blocks a writer, and each run
    passes over a table once, however many live rows come before the dead ones."""
    keys = list(rule.table.primary_key.columns)
    return _next_keys(db, keys, rule.dead(settings, now), after)


def _delete_batch(db: Database, rule: Rule, settings: Settings, now: int, found: list[Key]) -> int:
    """Delete the rows of ``found`` that are still dead (a short write: by key, the rule checked
    again, so a row that came back to life in between stays and no row is counted twice)."""
    keys = list(rule.table.primary_key.columns)
    chosen = keys[0].in_([k[0] for k in found]) if len(keys) == 1 else tuple_(*keys).in_(found)
    with db.transaction() as conn:
        result = conn.execute(delete(rule.table).where(chosen, rule.dead(settings, now)))
    return int(result.rowcount or 0)


def _batches(next_keys: Callable[[Key | None], list[Key]]) -> Iterator[list[Key]]:
    """The batches ``next_keys`` finds, each after the last key of the one before (read once
    the caller has dealt with it), until one is short or empty; at most MAX_BATCHES."""
    after: Key | None = None
    for _ in range(MAX_BATCHES):
        found = next_keys(after)
        if not found:
            return
        yield found
        if len(found) < BATCH:
            return
        after = found[-1]


def _prune_table(db: Database, rule: Rule, settings: Settings, now: int) -> int:
    if rule.parent is not None:
        return _prune_through_parent(db, rule, rule.parent, settings, now)
    dead = _batches(functools.partial(_dead_keys, db, rule, settings, now))
    return sum(_delete_batch(db, rule, settings, now, found) for found in dead)


def _prune_through_parent(
    db: Database, rule: Rule, parent: Parent, settings: Settings, now: int
) -> int:
    """Delete ``rule``'s rows batch by batch of their dead parents' rows (each found through
    the index on the referring column; every delete checks ``rule`` again)."""
    keys = list(rule.table.primary_key.columns)
    total = 0
    for parents in _batches(
        functools.partial(_next_keys, db, [parent.key], parent.dead(settings, now))
    ):
        children = parent.referred_by.in_([p[0] for p in parents])
        found = _batches(functools.partial(_next_keys, db, keys, children))
        total += sum(_delete_batch(db, rule, settings, now, batch) for batch in found)
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


def _bounded_count(conn: Connection, table: Table) -> int:
    sample = select(text("1")).select_from(table).limit(COUNT_LIMIT).subquery()
    return int(conn.execute(select(func.count()).select_from(sample)).scalar_one())


def table_rows(db: Database) -> dict[str, int]:
    """Rows in each pruned table, for the metrics; measured once per pruner run, never per
    scrape. SQLite counts (its count reads the smallest index: milliseconds per million rows).
    PostgreSQL counts at most :data:`COUNT_LIMIT` rows of a table and, for a table that has
    more, reports the planner's estimate (``pg_class.reltuples``, kept by autovacuum and
    ``ANALYZE``), never less than the limit."""
    tables = {rule.name: rule.table for rule in RULES}
    with db.engine.connect() as conn:
        if db.engine.dialect.name != "postgresql":
            counts = select(
                *(select(func.count()).select_from(t).scalar_subquery() for t in tables.values())
            )
            return dict(zip(tables, (int(n) for n in conn.execute(counts).one()), strict=True))
        estimates = {
            str(name): float(rows)
            for name, rows in conn.execute(
                text(
                    "SELECT relname, reltuples FROM pg_class WHERE relkind = 'r' "
                    "AND relnamespace = to_regnamespace(current_schema())::oid "
                    "AND relname = ANY(:names)"
                ),
                {"names": [t.name for t in tables.values()]},
            )
        }
        rows: dict[str, int] = {}
        for name, table in tables.items():
            counted = _bounded_count(conn, table)
            estimate = int(estimates.get(table.name, -1))
            rows[name] = counted if counted < COUNT_LIMIT else max(counted, estimate)
        return rows


def report(counts: dict[str, int] | None) -> None:
    if counts is None:
        log.info("prune skipped: another replica is pruning")
        return
    log.info(
        "pruned %d rows: %s",
        sum(counts.values()),
        " ".join(f"{table}={rows}" for table, rows in counts.items()),
    )
