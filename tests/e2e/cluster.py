"""Helpers for end-to-end tests with several `mcpauth serve` processes (replicas) on one
database, and with servers that are killed and restarted: seeding through the admin CLI,
starting a replica on a port of its own under the shared issuer, and an HTTP transport that
spreads a client's requests over the replicas like a load balancer without session affinity."""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from ..support import MCPAUTH, free_port, running
from .test_authorization_flow import PASSWORD, RESOURCE, SCOPES, SECRET_KEY, USERNAME, AuthServer

REDIRECT_URI = "http://127.0.0.1/callback"


def cluster(tmp_path: Path, database: str, *, issuer_port: int | None = None) -> AuthServer:
    """An AuthServer description (not started) on ``database``, seeded through the CLI with user
    alice and the resource RESOURCE, whose issuer is ``http://127.0.0.1:<issuer_port>``."""
    port = issuer_port or free_port()
    env = {
        "MCPAUTH_SECRET_KEY": SECRET_KEY,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "HOME": str(tmp_path),
    }
    server = AuthServer(
        issuer=f"http://127.0.0.1:{port}", port=port, database=database, env=env, cwd=tmp_path
    )
    server.cli("users", "add", USERNAME, "--password-stdin", stdin=PASSWORD + "\n")
    scope_args = [a for s in SCOPES for a in ("--scope", s)]
    server.cli(
        "resources", "add", RESOURCE, "--name", "Example MCP server", *scope_args,
        "--default-scope", "mcp:read",
    )  # fmt: skip
    return server


def add_first_party_client(server: AuthServer) -> str:
    """A public first-party client: a signed-in browser gets a code without any page."""
    created = server.add_client(
        "--name", "first party", "--redirect-uri", REDIRECT_URI,
        "--grant-type", "authorization_code", "--grant-type", "refresh_token",
        "--auth-method", "none", "--first-party",
    )  # fmt: skip
    return str(created["client_id"])


@contextmanager
def replica(
    server: AuthServer, port: int | None = None, *, extra_env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`mcpauth serve` for ``server`` (its issuer and database) listening on ``port`` (default:
    the issuer's port); stopped when the block ends, whatever state it is in."""
    port = port or server.port
    args = [
        MCPAUTH, "serve", "--issuer", server.issuer, "--port", str(port),
        "--database", server.database, "--log-level", "warning",
    ]  # fmt: skip
    env = {**server.env, **(extra_env or {})}
    with running(args, ready_url=f"http://127.0.0.1:{port}/health", env=env, cwd=server.cwd) as p:
        if not server.metadata:
            response = httpx2.get(
                f"http://127.0.0.1:{port}/.well-known/oauth-authorization-server", timeout=10
            )
            assert response.status_code == 200, response.text
            server.metadata = response.json()
        assert server.metadata["issuer"] == server.issuer
        yield p


def at(url: str, port: int) -> str:
    """``url`` (one of the issuer's endpoints) sent to the replica listening on ``port``."""
    return str(httpx2.URL(url).copy_with(port=port))


class Balancer(httpx2.BaseTransport):
    """Sends each request to the next replica in turn (round robin), whatever host the URL
    names: the issuer's URLs reach every replica. ``served`` records the port of each request."""

    def __init__(self, ports: Sequence[int]) -> None:
        self._ports = itertools.cycle(ports)
        self._transport = httpx2.HTTPTransport()
        self.served: list[int] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self._ports)
        self.served.append(port)
        request.url = request.url.copy_with(port=port)
        return self._transport.handle_request(request)

    def close(self) -> None:
        self._transport.close()


def token_form(client_id: str, **values: str) -> dict[str, str]:
    return {"client_id": client_id, "resource": RESOURCE, **values}


def json_body(response: httpx2.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return dict(json.loads(response.text))
