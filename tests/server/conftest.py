"""Fixtures for the authorization flow: a user, a resource and a public client."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import admin
from mcpauth.server.crypto import new_id
from mcpauth.server.identity.passwords import passwords_at
from mcpauth.server.storage.models import User

from ..conftest import PASSWORD_COST
from ..oauth import register_public_client

RESOURCE = "http://127.0.0.1:8000/mcp"
PASSWORD = "correct horse battery"


@pytest.fixture(scope="session")
def password_hash() -> str:
    """The shared test password, hashed once per session at the settings' test cost."""
    cost = PASSWORD_COST
    return passwords_at(cost["password_hash_time_cost"], cost["password_hash_memory_cost"]).hash(
        PASSWORD
    )


def add_user(app: Starlette, username: str, password_hash: str) -> str:
    ctx = app.state.mcpauth
    user = User(id=new_id(), username=username, password_hash=password_hash, created_at=ctx.now())
    with ctx.db.write() as session:
        session.add(user)
    return user.id


@pytest.fixture
def seeded(app: Starlette, password_hash: str) -> Starlette:
    ctx = app.state.mcpauth
    add_user(app, "alice", password_hash)
    add_user(app, "bob", password_hash)
    admin.add_resource(
        ctx,
        RESOURCE,
        name="Demo MCP server",
        scopes=["mcp:tools=Use the tools", "mcp:admin=Administer"],
        default_scopes=["mcp:tools"],
        is_default=True,
    )
    admin.add_resource(ctx, "http://127.0.0.1:8001/mcp", scopes=["other:read"])
    return app


@pytest.fixture
async def public_client(seeded: Starlette, http: httpx2.AsyncClient) -> dict[str, Any]:
    return await register_public_client(http)
