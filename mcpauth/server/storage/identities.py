"""Upstream identities and pending upstream sign-ins: the SQL behind sign-in through an
OpenID provider. An identity is (issuer, subject), never an email; a pending sign-in is taken
exactly once by a conditional DELETE whose row count says who won."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, CursorResult, Table, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from mcpauth.server.crypto import digest, new_id
from mcpauth.server.storage.models import UpstreamIdentity, UpstreamLogin, User

_LOGINS: Table = UpstreamLogin.__table__  # type: ignore[attr-defined]
_IDENTITIES: Table = UpstreamIdentity.__table__  # type: ignore[attr-defined]
_USERS: Table = User.__table__  # type: ignore[attr-defined]
MAX_USERNAME = 200  # users.username
NO_PASSWORD = "!"  # an account that signs in only through its identity provider


def local_username(issuer: str, subject: str) -> str:
    """The username of the account standing for (issuer, subject): ``issuer#subject``, or
    ``issuer#sha256:<digest>`` when that would not fit users.username (the same name the
    jwt-bearer grant gives an ID-JAG's subject, so both reach one account). A provider's issuer
    has at most 120 characters (settings), so the second form always fits."""
    username = f"{issuer}#{subject}"
    if len(username) > MAX_USERNAME:
        username = f"{issuer}#sha256:{digest(subject)}"
    return username


def has_password(password_hash: str) -> bool:
    """Whether an account can sign in with a password (an argon2 hash, not the ``!`` of
    accounts that sign in only through their identity provider)."""
    return password_hash.startswith("$argon2")


def add_login(session: Session, login: UpstreamLogin) -> None:
    """Store a pending upstream sign-in; an earlier one of the same browser for the same
    authorization request (or the account page) ends, so one browser holds at most one per
    request."""
    session.execute(
        delete(_LOGINS).where(
            _LOGINS.c.session_digest == login.session_digest,
            _LOGINS.c.interaction_id.is_(None)
            if login.interaction_id is None
            else _LOGINS.c.interaction_id == login.interaction_id,
        )
    )
    session.add(login)


def take_login(session: Session, state_digest: str, now: int) -> UpstreamLogin | None:
    """The live pending sign-in stored under ``state_digest``, deleted as it is read: only one
    caller (thread or replica) gets it; an expired one is deleted and not returned."""
    row = session.execute(select(_LOGINS).where(_LOGINS.c.digest == state_digest)).first()
    if row is None:
        return None
    result = session.execute(delete(_LOGINS).where(_LOGINS.c.digest == state_digest))
    won = isinstance(result, CursorResult) and result.rowcount == 1
    if not won or row.expires_at <= now:
        return None
    return UpstreamLogin.model_validate(row._mapping)


@dataclass(frozen=True)
class Claims:
    """What an ID token says about the person, as kept with their identity."""

    issuer: str
    subject: str
    email: str | None
    email_verified: bool
    name: str | None
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class SignedIn:
    user_id: str
    created: bool  # provisioned by this sign-in


class AccountConflict(Exception):
    """A local account with a password already has the name this identity's account would
    take; nothing is linked (an administrator decides)."""


def sign_in(session: Session, claims: Claims, provider_id: str, now: int) -> SignedIn:
    """The account of (issuer, subject), made on first sign-in (just in time), with the claims
    of this sign-in, each replacing the last one's (groups too: one the provider no longer
    sends is gone). A passwordless account of the same name (made for the same subject by the
    jwt-bearer grant) is the same person and is linked; nothing is ever linked by email.

    Raises:
        AccountConflict: an account with a password, or with identities of its own, holds the
            name.
    """
    identity = session.get(UpstreamIdentity, (claims.issuer, claims.subject))
    created = False
    if identity is None:
        username = local_username(claims.issuer, claims.subject)
        same_name = session.execute(
            select(_USERS.c.id, _USERS.c.password_hash).where(_USERS.c.username == username)
        ).first()
        if same_name is not None and (
            has_password(same_name.password_hash) or _has_identities(session, same_name.id)
        ):
            # a password account, or one that signs in through other identities (this one was
            # removed from it): never taken over by the name alone
            raise AccountConflict(username)
        if same_name is None:
            user_id = new_id()
            session.add(
                User(id=user_id, username=username, password_hash=NO_PASSWORD, created_at=now)
            )
            created = True
        else:
            user_id = str(same_name.id)
        identity = _new_identity(claims, user_id, provider_id, now)
    _refresh(session, identity, claims, provider_id, now)
    return SignedIn(identity.user_id, created)


def _new_identity(claims: Claims, user_id: str, provider_id: str, now: int) -> UpstreamIdentity:
    return UpstreamIdentity(
        issuer=claims.issuer,
        subject=claims.subject,
        user_id=user_id,
        provider_id=provider_id,
        created_at=now,
        last_login_at=now,
    )


def _has_identities(session: Session, user_id: str) -> bool:
    found = session.execute(
        select(_IDENTITIES.c.subject).where(_IDENTITIES.c.user_id == user_id).limit(1)
    ).first()
    return found is not None


def _refresh(
    session: Session, identity: UpstreamIdentity, claims: Claims, provider_id: str, now: int
) -> None:
    """An identity with the claims of this sign-in, each replacing the last one's."""
    identity.provider_id = provider_id
    identity.email = claims.email
    identity.email_verified = claims.email_verified
    identity.name = claims.name
    identity.groups = list(claims.groups)  # replaced: a group the provider dropped is gone
    identity.last_login_at = now
    session.add(identity)


def display_name(session: Session, user: User) -> str:
    """How a person is named on the pages: a local account (with a password, whatever it has
    linked) by its username, an account made by a provider by the email (else the name) of its
    last sign-in."""
    if has_password(user.password_hash):
        return user.username
    row = session.execute(
        select(_IDENTITIES.c.email, _IDENTITIES.c.name)
        .where(_IDENTITIES.c.user_id == user.id)
        .order_by(_IDENTITIES.c.last_login_at.desc())
        .limit(1)
    ).first()
    if row is None:
        return user.username
    return str(row.email or row.name or user.username)


@dataclass(frozen=True)
class Person:
    """An account as its tokens may describe it: its username, whether it signs in with a
    password, and the claims of its most recent upstream sign-in (none: a local account, or
    one made by the jwt-bearer grant that never signed in through a provider)."""

    username: str
    local: bool
    email: str | None = None
    email_verified: bool = False
    name: str | None = None
    groups: tuple[str, ...] = ()


def person(conn: Connection | Session, user_id: str) -> Person | None:
    """The account ``user_id`` with its current claims; None when no account has that id (a
    client's own tokens name the client)."""
    user = conn.execute(
        select(_USERS.c.username, _USERS.c.password_hash).where(_USERS.c.id == user_id)
    ).first()
    if user is None:
        return None
    row = conn.execute(
        select(
            _IDENTITIES.c.email,
            _IDENTITIES.c.email_verified,
            _IDENTITIES.c.name,
            _IDENTITIES.c.groups,
        )
        .where(_IDENTITIES.c.user_id == user_id)
        .order_by(_IDENTITIES.c.last_login_at.desc(), _IDENTITIES.c.issuer, _IDENTITIES.c.subject)
        .limit(1)
    ).first()
    local = has_password(str(user.password_hash))
    if row is None:
        return Person(str(user.username), local)
    groups = row.groups if isinstance(row.groups, list) else []
    return Person(
        str(user.username),
        local,
        email=row.email,
        email_verified=bool(row.email_verified),
        name=row.name,
        groups=tuple(str(group) for group in groups),
    )


def identities_by_provider(session: Session) -> dict[str, int]:
    """How many identities each provider id has signed in."""
    rows = session.execute(
        select(_IDENTITIES.c.provider_id, func.count()).group_by(_IDENTITIES.c.provider_id)
    )
    return {str(provider): int(count) for provider, count in rows}


def forget_user(session: Session, user_id: str) -> None:
    """Delete the identities of an account being removed."""
    session.execute(delete(_IDENTITIES).where(_IDENTITIES.c.user_id == user_id))


# --------------------------------------------------------------------------------------------
# linking, by the account's own explicit action (never by a matching email)


class IdentityTaken(Exception):
    """The identity already signs in to another account; nothing is linked."""


class ProviderTaken(Exception):
    """The account already has another identity at this provider; nothing is linked."""


class LastWayIn(Exception):
    """Removing it (an identity, a passkey) would leave the account with no way to sign in."""


@dataclass(frozen=True)
class LinkedIdentity:
    provider_id: str
    email: str | None
    name: str | None
    created_at: int


def link(session: Session, claims: Claims, provider_id: str, user_id: str, now: int) -> bool:
    """Link (issuer, subject) to ``user_id``, an account signed in in this browser that asked
    for it, with the claims of this sign-in; False when it was linked already.

    Raises:
        IdentityTaken: the identity belongs to another account.
        ProviderTaken: the account has another identity at this provider.
    """
    identity = session.get(UpstreamIdentity, (claims.issuer, claims.subject))
    if identity is not None and identity.user_id != user_id:
        raise IdentityTaken(provider_id)
    created = identity is None
    if identity is None:
        other = session.execute(
            select(_IDENTITIES.c.subject).where(
                _IDENTITIES.c.user_id == user_id, _IDENTITIES.c.issuer == claims.issuer
            )
        ).first()
        if other is not None:
            raise ProviderTaken(provider_id)
        identity = _new_identity(claims, user_id, provider_id, now)
    _refresh(session, identity, claims, provider_id, now)
    try:
        session.flush()  # the unique (user_id, issuer) index: a link that raced another
    except IntegrityError as exc:
        raise ProviderTaken(provider_id) from exc
    return created


def linked_identities(session: Session, user_id: str) -> list[LinkedIdentity]:
    """The identities an account signs in with, oldest first."""
    rows = session.execute(
        select(
            _IDENTITIES.c.provider_id,
            _IDENTITIES.c.email,
            _IDENTITIES.c.name,
            _IDENTITIES.c.created_at,
        )
        .where(_IDENTITIES.c.user_id == user_id)
        .order_by(_IDENTITIES.c.created_at, _IDENTITIES.c.provider_id)
    ).all()
    return [LinkedIdentity(r.provider_id, r.email, r.name, r.created_at) for r in rows]


def unlink(
    session: Session,
    user_id: str,
    provider_id: str,
    configured: set[str],
    *,
    passwords_sign_in: bool,
) -> int:
    """Remove the account's identities at ``provider_id``; how many were removed. The account's
    row is locked first (PostgreSQL; SQLite writes one at a time), so two removals at once
    cannot both pass the check below. An account named after a removed identity (made by it,
    just in time) is renamed, so that identity can never reach it again by the name.

    Only the ways in that the current settings allow count: an identity at a provider still
    configured (``configured``: their ids), and the account's password only while local
    accounts sign in (``passwords_sign_in``). A password kept from before ``local_accounts =
    false`` opens nothing, so it must not let the last provider go.

    Raises:
        LastWayIn: the account would keep no way in that the settings allow.
    """
    user = session.execute(
        select(_USERS.c.username, _USERS.c.password_hash)
        .where(_USERS.c.id == user_id)
        .with_for_update()
    ).first()
    if user is None:
        return 0
    mine = session.execute(
        select(_IDENTITIES.c.provider_id, _IDENTITIES.c.issuer, _IDENTITIES.c.subject).where(
            _IDENTITIES.c.user_id == user_id
        )
    ).all()
    removed = [row for row in mine if row.provider_id == provider_id]
    if not removed:
        return 0
    others = [
        row for row in mine if row.provider_id != provider_id and row.provider_id in configured
    ]
    if not others and not (passwords_sign_in and has_password(user.password_hash)):
        raise LastWayIn(provider_id)
    session.execute(
        delete(_IDENTITIES).where(
            _IDENTITIES.c.user_id == user_id, _IDENTITIES.c.provider_id == provider_id
        )
    )
    if user.username in {local_username(row.issuer, row.subject) for row in removed}:
        session.execute(
            update(_USERS).where(_USERS.c.id == user_id).values(username=f"account#{user_id}")
        )
    return len(removed)
