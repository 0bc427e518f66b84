"""Users, clients and resources: the rows the admin command line and registration manage."""

from __future__ import annotations

from sqlmodel import Session, col, select

from mcpauth.server.storage.models import Client, Resource, User


def user_by_name(session: Session, username: str) -> User | None:
    return session.exec(select(User).where(User.username == username)).first()


def list_users(session: Session) -> list[User]:
    return list(session.exec(select(User).order_by(col(User.username))))


def get_client(session: Session, client_id: str) -> Client | None:
    return session.get(Client, client_id)


def list_clients(session: Session) -> list[Client]:
    return list(session.exec(select(Client).order_by(col(Client.created_at))))


def get_resource(session: Session, uri: str) -> Resource | None:
    return session.get(Resource, uri)


def list_resources(session: Session) -> list[Resource]:
    return list(session.exec(select(Resource).order_by(col(Resource.uri))))


def all_scopes(session: Session) -> list[str]:
    """Every scope of every registered resource, sorted, for ``scopes_supported``."""
    scopes: set[str] = set()
    for resource in list_resources(session):
        scopes.update(resource.scopes)
    return sorted(scopes)
