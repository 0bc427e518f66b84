"""The official MCP Python SDK client signs in through an upstream OpenID provider: `mcpauth
demo` (the authorization server and the protected demo MCP server) configured with one
`[[mcpauth.upstream]]` provider, a real node-oidc-provider (tests/e2e/node/upstream_provider.mjs),
and `local_accounts = false`. The SDK discovers, registers and sends the person to mcpauth; in a
real Chromium the person presses "Continue with Example Corp", signs in at the provider, approves
on mcpauth's consent page; the SDK gets its tokens and calls `whoami`, whose subject is the
account made just in time for the provider's subject."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata
from pydantic import AnyUrl

from ..support import MCPAUTH, ensure_npm_peers, free_port, run_cli, running, stop, wait_for
from .chromium_opener import CallbackListener, PersonThread, person_in_chromium, query
from .test_clients_in_browser import FileTokenStorage, session
from .test_demo import Demo, wait_for_banner
from .test_sdk_oauth_client import Traffic, text

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / ".node22" / "node_modules" / ".bin" / "node"


@dataclass
class FederatedDemo:
    demo: Demo
    upstream: str  # the provider's issuer


@pytest.fixture(scope="module")
def federated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FederatedDemo]:
    ensure_npm_peers()  # oidc-provider (and Node) from npm, pinned
    folder = tmp_path_factory.mktemp("federated-demo")
    auth_port, mcp_port, idp_port = free_port(), free_port(), free_port()
    issuer = f"http://127.0.0.1:{auth_port}"
    upstream = f"http://127.0.0.1:{idp_port}"
    provider = [
        str(NODE),
        str(ROOT / "tests" / "e2e" / "node" / "upstream_provider.mjs"),
        str(ROOT / ".npm-peers"),
        str(idp_port),
        "corp",
        "mcpauth-demo",
        "corp-secret-0123456789",
        f"{issuer}/upstream/corp/callback",
    ]
    config = folder / "mcpauth.toml"
    config.write_text(
        f"""
[mcpauth]
local_accounts = false

[[mcpauth.upstream]]
id = "corp"
name = "Example Corp"
issuer = "{upstream}"
client_id = "mcpauth-demo"
client_secret_env = "CORP_SECRET"
allowed_email_domains = ["example.com"]
"""
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MCPAUTH_")},
        "HOME": str(folder),
        "XDG_DATA_HOME": str(folder / "xdg"),
        "MCPAUTH_CONFIG": str(config),
        "CORP_SECRET": "corp-secret-0123456789",
    }
    args = [
        MCPAUTH,
        "demo",
        "--data-dir",
        str(folder / "data"),
        "--auth-port",
        str(auth_port),
        "--mcp-port",
        str(mcp_port),
    ]
    resource = f"http://127.0.0.1:{mcp_port}/mcp"
    prm = f"http://127.0.0.1:{mcp_port}/.well-known/oauth-protected-resource/mcp"
    with running(provider, ready_url=f"{upstream}/.well-known/openid-configuration", cwd=folder):
        out_path, err_path = folder / "stdout.log", folder / "stderr.log"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(
                args, env=env, cwd=folder, stdout=out, stderr=err, start_new_session=True
            )
            try:
                stderr = wait_for_banner(err_path, process)
                wait_for(prm, timeout=30, process=process)
                demo = Demo(issuer, resource, prm, folder / "data", "", stderr, env)
                yield FederatedDemo(demo, upstream)
            finally:
                stop(process)


def through_the_provider(person: Any, url: str, issuer: str, upstream: str) -> str:
    """In the person's Chromium: mcpauth's sign-in page, the provider's, mcpauth's consent;
    the URL the browser lands on at the client."""
    redirect_uri = query(url)["redirect_uri"]
    page = person.context.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(url)
        assert page.get_by_label("Password").count() == 0  # local_accounts = false
        page.get_by_role("button", name="Continue with Example Corp").click()
        page.wait_for_url(re.compile(re.escape(upstream) + "/interaction/"))
        page.locator("input[name=login]").fill("alice")
        page.locator("input[name=password]").fill("any password")
        page.locator("button.login-submit").click()
        page.wait_for_url(re.compile(re.escape(issuer) + "/interaction/"))
        assert page.get_by_text("alice@example.com").is_visible()
        page.get_by_role("button", name="Approve").click()
        page.wait_for_url(lambda landed: landed.startswith(redirect_uri))
        return str(page.url)
    finally:
        page.close()


async def test_the_python_sdk_client_signs_in_through_the_upstream_provider_and_calls_a_tool(
    federated: FederatedDemo, tmp_path: Path
) -> None:
    demo = federated.demo
    listener = CallbackListener()
    landed: list[str] = []

    async def redirect_handler(url: str) -> None:
        def trip(person: Any) -> str:
            return through_the_provider(person, url, demo.issuer, federated.upstream)

        landed.append(await anyio.to_thread.run_sync(lambda: chromium.call(trip)))

    async def callback_handler() -> AuthorizationCodeResult:
        received = await anyio.to_thread.run_sync(listener.wait, len(landed))
        return AuthorizationCodeResult(
            code=received["code"], state=received.get("state"), iss=received.get("iss")
        )

    metadata = OAuthClientMetadata(
        client_name="mcpauth e2e: SDK client through an upstream provider",
        redirect_uris=[AnyUrl(listener.redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    storage = FileTokenStorage(tmp_path / "sdk-client.json")
    auth = OAuthClientProvider(
        demo.resource,
        metadata,
        storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    chromium: PersonThread
    try:
        with person_in_chromium("unused", "unused") as chromium:
            async with session(demo, auth, Traffic()) as client:
                answer = text(await client.call_tool("whoami", {}))
    finally:
        listener.close()

    database = f"sqlite:///{demo.data_dir / 'mcpauth.db'}"
    listed = run_cli(["users", "list", "--database", database], env=demo.env)
    users = {u["username"]: u["id"] for u in json.loads(listed.stdout)}
    account = users[f"{federated.upstream}#alice"]  # made just in time at the first sign-in
    client_id = auth.context.client_info.client_id  # type: ignore[union-attr]
    assert len(landed) == 1
    assert answer == f"subject={account} client={client_id} scopes=mcp:tools"
