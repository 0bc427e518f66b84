"""Sign-in through an identity provider, then a tool that works as the caller behind the MCP
server (issue #14, docs/security.md T37): a real node-oidc-provider
(tests/e2e/node/upstream_provider.mjs) as mcpauth's only way to sign in, with ``keep_tokens``
and the gateway in ``release_to``; a real `mcpauth serve`; the examples' notes server and
gateway server as real processes. The official MCP Python SDK client discovers, registers and
sends the person to mcpauth; in headless Chromium the person chooses the provider, signs in
there, approves on mcpauth's consent page. The SDK then calls the gateway's tools: one
exchanges the caller's token (RFC 8693) for a token for the notes server and calls it, the
other gets the caller's own token at the provider and calls the provider's userinfo endpoint
with it. Neither the caller's token nor the provider's reaches the SDK client's other server."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata
from pydantic import AnyUrl

from ..readme import readme_block
from ..support import MCPAUTH, ensure_npm_peers, free_port, run_cli, running
from .chromium_opener import CallbackListener, PersonThread, person_in_chromium, query
from .test_clients_in_browser import FileTokenStorage
from .test_sdk_oauth_client import text

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / ".node22" / "node_modules" / ".bin" / "node"
EXAMPLES = ROOT / "examples"
PYTHON = str(ROOT / ".venv" / "bin" / "python")
CORP_SECRET = "corp-client-secret-0123456789"
KEEP_TOKENS = readme_block("upstream-keep-tokens")
EXCHANGE_CLIENT = readme_block("exchange-client")


@dataclass
class Deployment:
    issuer: str
    upstream: str  # the provider's issuer
    notes: str  # the notes MCP server's resource
    gateway: str  # the gateway MCP server's resource
    gateway_client: str  # the gateway's own client id at mcpauth
    env: dict[str, str]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    ensure_npm_peers()  # oidc-provider (and Node) from npm, pinned
    folder = tmp_path_factory.mktemp("upstream-gateway")
    auth_port, idp_port, notes_port, gateway_port = (free_port() for _ in range(4))
    issuer, upstream = f"http://127.0.0.1:{auth_port}", f"http://127.0.0.1:{idp_port}"
    notes = f"http://127.0.0.1:{notes_port}/mcp"
    gateway = f"http://127.0.0.1:{gateway_port}/mcp"

    # the README's settings and command, with this machine's addresses
    def here(text: str) -> str:
        for theirs, ours in (
            ("https://login.example.com", upstream),
            ("https://tools.example.com/mcp", gateway),
            ("https://notes.example.com/mcp", notes),
            ('client_id = "mcpauth"', 'client_id = "mcpauth-at-corp"'),
        ):
            text = text.replace(theirs, ours)
        assert "https://" not in text  # every address replaced
        return text

    config = folder / "mcpauth.toml"
    config.write_text("[mcpauth]\nlocal_accounts = false\n\n" + here(KEEP_TOKENS.text))
    env = {
        "MCPAUTH_DATABASE_URL": f"sqlite:///{folder / 'mcpauth.db'}",
        "MCPAUTH_SECRET_KEY": "upstream-gateway-secret-0123456789",
        "MCPAUTH_ISSUER": issuer,
        "MCPAUTH_CONFIG": str(config),
        "CORP_CLIENT_SECRET": CORP_SECRET,
    }
    for command in (
        ["resources", "add", notes, "--name", "Example notes", "--scope",
         "notes:read=Read your notes", "--default-scope", "notes:read"],
        ["resources", "add", gateway, "--name", "Example gateway", "--scope",
         "gateway:use=Use the gateway", "--default-scope", "gateway:use"],
    ):  # fmt: skip
        added = run_cli(command, env=env)
        assert added.returncode == 0, added.stderr
    argv = shlex.split(here(EXCHANGE_CLIENT.text).replace("\\\n", " "))
    assert argv[:3] == ["mcpauth", "clients", "add"]
    registered = run_cli(argv[1:], env=env)
    assert registered.returncode == 0, registered.stderr
    credentials = folder / "gateway.json"
    credentials.write_text(registered.stdout)
    credentials.chmod(0o600)
    provider = [
        str(NODE), str(ROOT / "tests" / "e2e" / "node" / "upstream_provider.mjs"),
        str(ROOT / ".npm-peers"), str(idp_port), "corp", "mcpauth-at-corp", CORP_SECRET,
        f"{issuer}/upstream/corp/callback",
    ]  # fmt: skip
    notes_server = [
        PYTHON, str(EXAMPLES / "protected_server.py"), "--port", str(notes_port),
        "--issuer", issuer,
    ]  # fmt: skip
    gateway_server = [
        PYTHON, str(EXAMPLES / "gateway_server.py"), "--port", str(gateway_port),
        "--issuer", issuer, "--downstream", notes, "--credentials", str(credentials),
        "--provider", "corp", "--provider-api", f"{upstream}/me",
    ]  # fmt: skip
    with ExitStack() as stack:
        stack.enter_context(
            running(provider, ready_url=f"{upstream}/.well-known/openid-configuration", cwd=folder)
        )
        stack.enter_context(
            running([MCPAUTH, "serve", "--port", str(auth_port)], ready_url=f"{issuer}/health",
                    env=env, cwd=folder)
        )  # fmt: skip
        stack.enter_context(running(notes_server, ready_url=notes, cwd=folder))
        stack.enter_context(running(gateway_server, ready_url=gateway, cwd=folder))
        yield Deployment(
            issuer, upstream, notes, gateway, json.loads(registered.stdout)["client_id"], env
        )


def through_the_provider(person: Any, url: str, deployment: Deployment) -> str:
    """In the person's Chromium: mcpauth's sign-in page (only the provider's button), the
    provider's own sign-in form, mcpauth's consent page; the URL the browser lands on."""
    redirect_uri = query(url)["redirect_uri"]
    page = person.context.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(url)
        assert page.get_by_label("Password").count() == 0  # local_accounts = false
        page.get_by_role("button", name="Continue with Example Corp").click()
        page.wait_for_url(re.compile(re.escape(deployment.upstream) + "/interaction/"))
        page.locator("input[name=login]").fill("alice")
        page.locator("input[name=password]").fill("any password")
        page.locator("button.login-submit").click()
        page.wait_for_url(re.compile(re.escape(deployment.issuer) + "/interaction/"))
        assert page.get_by_text("alice@example.com").is_visible()
        assert page.get_by_text("Example gateway").first.is_visible()  # the resource
        page.get_by_role("button", name="Approve").click()
        page.wait_for_url(lambda landed: landed.startswith(redirect_uri))
        return str(page.url)
    finally:
        page.close()


@asynccontextmanager
async def connected(url: str, auth: httpx2.Auth, seen: list[str]) -> AsyncIterator[ClientSession]:
    async def remember(request: httpx2.Request) -> None:
        seen.append(request.headers.get("authorization", ""))

    async with (
        httpx2.AsyncClient(auth=auth, timeout=60, event_hooks={"request": [remember]}) as http,  # type: ignore[arg-type]
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def test_a_tool_calls_another_mcp_server_and_the_provider_s_api_as_the_signed_in_person(
    deployment: Deployment, tmp_path: Path
) -> None:
    listener = CallbackListener()
    landed: list[str] = []
    chromium: PersonThread

    async def redirect_handler(url: str) -> None:
        def trip(person: Any) -> str:
            return through_the_provider(person, url, deployment)

        landed.append(await anyio.to_thread.run_sync(lambda: chromium.call(trip)))

    async def callback_handler() -> AuthorizationCodeResult:
        received = await anyio.to_thread.run_sync(listener.wait, len(landed))
        return AuthorizationCodeResult(
            code=received["code"], state=received.get("state"), iss=received.get("iss")
        )

    auth = OAuthClientProvider(
        deployment.gateway,
        OAuthClientMetadata(
            client_name="mcpauth e2e: SDK client calling the gateway",
            redirect_uris=[AnyUrl(listener.redirect_uri)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        FileTokenStorage(tmp_path / "sdk-client.json"),
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    seen: list[str] = []
    try:
        with person_in_chromium("unused", "unused") as chromium:
            async with connected(deployment.gateway, auth, seen) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                notes = text(await client.call_tool("notes_elsewhere", {}))
                profile = json.loads(text(await client.call_tool("my_profile", {})))
                again = json.loads(text(await client.call_tool("my_profile", {})))
    finally:
        listener.close()

    assert len(landed) == 1  # one sign-in for everything
    assert {"notes_elsewhere", "my_profile"} <= tools
    # (i) the notes server saw the gateway acting for the person (the exchanged token's act)
    assert notes == f"{deployment.gateway_client}: buy milk; write the report"
    # (ii) the provider's own userinfo endpoint answered for the person who signed in there
    assert profile["sub"] == "alice"
    assert profile["email"] == "alice@example.com"
    assert again == profile
    # the account was made just in time for the provider's subject
    listed = run_cli(["users", "list"], env=deployment.env)
    assert [u["username"] for u in json.loads(listed.stdout)] == [f"{deployment.upstream}#alice"]
    # the SDK client only ever sent its own token, and only to the gateway
    bearer = {header for header in seen if header}
    assert len(bearer) == 1
