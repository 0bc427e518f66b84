"""Users, clients and resources: finding, adding and removing the rows the admin command line,
registration and sign-in manage."""

from __future__ import annotations

from sqlmodel import Session, col, delete, select

from mcpauth.server.crypto import new_id
from mcpauth.server.storage import identities, second_factors, upstream_tokens
from mcpauth.server.storage.models import (
    BrowserSessionRecord,
    Client,
    Consent,
    Grant,
    RefreshToken,
    Resource,
    User,
)


def get_user(session: Session, user_id: str) -> User | None:
    return session.get(User, user_id)


def lock_user(session: Session, user_id: str) -> User | None:
    """The user ``user_id``, its row locked until the transaction ends (PostgreSQL's FOR
    UPDATE; SQLite's write transactions already run one at a time): a change that must leave
    the account a way in (removing its last passkey) is decided one request at a time."""
    return session.exec(select(User).where(User.id == user_id).with_for_update()).first()


def user_by_name(session: Session, username: str) -> User | None:
    return session.exec(select(User).where(User.username == username)).first()


def add_user(
    session: Session, username: str, password_hash: str, now: int, *, admin: bool = False
) -> User:
    user = User(
        id=new_id(), username=username, password_hash=password_hash, created_at=now, is_admin=admin
    )
    session.add(user)
    return user


def save_user(session: Session, user: User) -> None:
    """Store the changes made to a user read in this unit of work."""
    session.add(user)


def user_disabled(session: Session, user_id: str) -> bool:
    """Whether an operator disabled the user ``user_id`` (no token is issued for her)."""
    return bool(session.exec(select(User.disabled).where(User.id == user_id)).first())


def find_or_add_user(session: Session, username: str, now: int) -> str:
    """The id of the user called ``username``, created on first use with no password (it can
    sign in only through the identity provider that named it)."""
    user = user_by_name(session, username)
    if user is None:
        user = add_user(session, username, "!", now)
    return user.id


def remove_user(session: Session, user: User) -> None:
    """Remove ``user`` with her grants, refresh tokens, consents, browser sessions, upstream
    identities, kept upstream tokens and second factors (a later sign-in through a provider
    provisions a new account)."""
    grant_ids = list(session.exec(select(Grant.id).where(Grant.user_id == user.id)))
    session.exec(delete(RefreshToken).where(col(RefreshToken.grant_id).in_(grant_ids)))
    session.exec(delete(Grant).where(col(Grant.user_id) == user.id))
    session.exec(delete(Consent).where(col(Consent.user_id) == user.id))
    session.exec(delete(BrowserSessionRecord).where(col(BrowserSessionRecord.user_id) == user.id))
    identities.forget_user(session, user.id)
    upstream_tokens.forget(session, user.id)
    second_factors.forget_user(session, user.id)
    session.delete(user)


def list_users(session: Session) -> list[User]:
    return list(session.exec(select(User).order_by(col(User.username))))


def get_client(session: Session, client_id: str) -> Client | None:
    return session.get(Client, client_id)


def save_client(session: Session, client: Client) -> None:
    """Store a new client, or the changes made to one read in this unit of work."""
    session.add(client)


def replace_client(session: Session, client: Client) -> None:
    """Store ``client`` over its previous version, if any, keeping when it was first stored
    (a metadata-document client fetched again)."""
    stored = session.get(Client, client.client_id)
    if stored is not None:
        client.created_at = stored.created_at
        client.disabled = stored.disabled
    session.merge(client)


def admin_client_names(session: Session, other_than: str | None) -> list[str]:
    """The names of the clients the operator registered (but ``other_than``)."""
    query = select(Client.client_name).where(Client.source == "admin")
    return list(session.exec(query.where(Client.client_id != other_than)).all())


def list_clients(session: Session) -> list[Client]:
    return list(session.exec(select(Client).order_by(col(Client.created_at))))


def get_resource(session: Session, uri: str) -> Resource | None:
    return session.get(Resource, uri)


def add_resource(session: Session, resource: Resource) -> None:
    """Store ``resource``; when it is the default, the previous default no longer is."""
    if resource.is_default:
        for other in list_resources(session):
            if other.is_default:
                other.is_default = False
                session.add(other)
    session.add(resource)


def save_resource(session: Session, resource: Resource) -> None:
    """Store the changes made to a resource read in this unit of work."""
    session.add(resource)


def remove_resource(session: Session, resource: Resource) -> None:
    session.delete(resource)


def list_resources(session: Session) -> list[Resource]:
    return list(session.exec(select(Resource).order_by(col(Resource.uri))))


def all_scopes(session: Session) -> list[str]:
    """Every scope of every registered resource, sorted, for ``scopes_supported``."""
    scopes: set[str] = set()
    for resource in list_resources(session):
        scopes.update(resource.scopes)
    return sorted(scopes)
