"""Real MCP clients complete OAuth against a real `mcpauth demo` process, the person signing in and
consenting in a real headless Chromium (Debian's, driven by Playwright through `tests/chromium.py`;
the pages are filled and clicked, never posted by hand).

Three clients, each: a first authorization (discovery, dynamic registration, PKCE, sign-in and
consent in Chromium, the code back to the client's loopback redirect), a tool call (`whoami`), a
step-up (`reset_counter` needs `mcp:admin`: 403 `insufficient_scope`, consent again in Chromium,
the call succeeds) and, after a restart of the client, a refresh with the stored refresh token and
no browser at all:

- the official MCP Python SDK (`OAuthClientProvider` over httpx2, `streamable_http_client`);
- `mcpauth login` / `mcpauth token` (the browser is `python -m tests.e2e.chromium_opener %s`);
- the official TypeScript SDK client (`@modelcontextprotocol/client`, `tests/e2e/node/`).

One more test sends an unmodified Chromium through sign-in and consent for a loopback public
client registered by DCR and checks the redirect's `code`, `state` and `iss` (RFC 9207)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import anyio.to_thread
import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from .. import chromium
from ..support import MCPAUTH, ensure_npm_peers
from . import test_demo
from .chromium_opener import CallbackListener, PersonThread, Trip, person_in_chromium, query
from .test_demo import Demo, demo_password, demo_user_id
from .test_sdk_oauth_client import Traffic, claims, scope_param, text

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]

demo = test_demo.demo  # the fixture: `mcpauth demo` on free ports, for this module


# --------------------------------------------------------------------------------------------
# an unmodified browser and a DCR client


def test_chromium_signs_in_and_consents_for_a_dcr_loopback_client_and_gets_back_code_state_iss(
    demo: Demo,
) -> None:
    listener = CallbackListener()
    try:
        registered = httpx2.post(
            f"{demo.issuer}/register",
            json={
                "client_name": "mcpauth e2e: loopback public client",
                "redirect_uris": [listener.redirect_uri],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
            },
            timeout=10,
        )
        assert registered.status_code == 201, registered.text
        client_id = registered.json()["client_id"]
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        state = secrets.token_urlsafe(16)
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": listener.redirect_uri,
            "state": state,
            "code_challenge": challenge.rstrip(b"=").decode(),
            "code_challenge_method": "S256",
            "resource": demo.resource,
            "scope": "mcp:tools",
        }
        with person_in_chromium("demo", demo_password(demo)) as person:
            trip = person.authorize(f"{demo.issuer}/authorize?{urlencode(params)}")
            callback = listener.wait(1)
            # the code is good for exactly this client, verifier and resource
            redeemed = httpx2.post(
                f"{demo.issuer}/token",
                data={
                    "grant_type": "authorization_code",
                    "code": callback["code"],
                    "redirect_uri": listener.redirect_uri,
                    "client_id": client_id,
                    "code_verifier": verifier,
                    "resource": demo.resource,
                },
                timeout=10,
            )
            # the same browser lists the application on /account and revokes it
            notice = person.call(lambda someone: _revoke_on_account(someone, demo.issuer))
    finally:
        listener.close()

    assert not trip.error, trip.error
    assert trip.pages == ["login", "consent"]
    assert trip.landed.startswith(listener.redirect_uri + "?")
    assert trip.problems() == []
    assert set(callback) == {"code", "state", "iss"}
    assert callback["state"] == state
    assert callback["iss"] == demo.issuer  # RFC 9207 §2
    assert callback == trip.callback
    assert redeemed.status_code == 200, redeemed.text
    assert claims(redeemed.json()["access_token"])["sub"] == demo_user_id(demo)
    assert notice == "Access for mcpauth e2e: loopback public client was revoked."
    refreshed = httpx2.post(
        f"{demo.issuer}/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": redeemed.json()["refresh_token"],
            "client_id": client_id,
        },
        timeout=10,
    )
    assert refreshed.json()["error"] == "invalid_grant"  # the grant died with the revocation


def _revoke_on_account(person: Any, issuer: str) -> str:
    """Open /account in the person's browser, revoke the loopback client, return the notice."""
    page = person.context.new_page()
    page.goto(f"{issuer}/account")
    page.get_by_role("link", name=re.compile("Revoke access for mcpauth e2e")).click()
    page.get_by_role("button", name="Revoke access").click()
    notice = str(page.get_by_role("status").inner_text())
    page.close()
    return notice


# --------------------------------------------------------------------------------------------
# (a) the official MCP Python SDK client


class FileTokenStorage:
    """The SDK's `TokenStorage` protocol over a JSON file, as an application keeps it between
    runs. The SDK (mcp 2.3.0) restores only the tokens and the client from its storage; a
    restarted application must give it back the rest (:func:`restarted_provider`), so the file
    also keeps the access token's absolute `expires_at` and the authorization server metadata."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, Any]:
        return dict(json.loads(self.path.read_text())) if self.path.exists() else {}

    def write(self, document: dict[str, Any]) -> None:
        self.path.write_text(json.dumps(document, indent=2))
        self.path.chmod(0o600)

    async def get_tokens(self) -> OAuthToken | None:
        stored = self.read().get("tokens")
        return OAuthToken.model_validate(stored) if stored else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        document = self.read()
        document["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        document["expires_at"] = time.time() + tokens.expires_in if tokens.expires_in else None
        self.write(document)

    def remember_metadata(self, provider: OAuthClientProvider) -> None:
        metadata = provider.context.oauth_metadata
        assert metadata is not None, "the client has not discovered its authorization server"
        document = self.read()
        document["authorization_server"] = metadata.model_dump(mode="json", exclude_none=True)
        self.write(document)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        stored = self.read().get("client")
        return OAuthClientInformationFull.model_validate(stored) if stored else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        document = self.read()
        document["client"] = client_info.model_dump(mode="json", exclude_none=True)
        self.write(document)


class ChromiumRedirect:
    """The SDK's redirect and callback handlers for a person at Chromium: the authorization URL
    goes to the browser, which lands on this client's own loopback listener; the callback handler
    hands the listener's `code`, `state` and `iss` to the SDK (which checks state and iss)."""

    def __init__(self, person: PersonThread, listener: CallbackListener) -> None:
        self.person = person
        self.listener = listener
        self.trips: list[Trip] = []

    async def redirect_handler(self, url: str) -> None:
        trip = await anyio.to_thread.run_sync(self.person.authorize, url)
        self.trips.append(trip)
        assert not trip.error, f"the authorization server refused: {trip.error}"

    async def callback_handler(self) -> AuthorizationCodeResult:
        received = await anyio.to_thread.run_sync(self.listener.wait, len(self.trips))
        return AuthorizationCodeResult(
            code=received["code"], state=received.get("state"), iss=received.get("iss")
        )


def sdk_provider(
    demo: Demo, storage: FileTokenStorage, redirect: ChromiumRedirect
) -> OAuthClientProvider:
    metadata = OAuthClientMetadata(
        client_name="mcpauth e2e: official Python SDK client in Chromium",
        redirect_uris=[AnyUrl(redirect.listener.redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(
        demo.resource,
        metadata,
        storage,
        redirect_handler=redirect.redirect_handler,
        callback_handler=redirect.callback_handler,
    )


def restarted_provider(
    demo: Demo, storage: FileTokenStorage, redirect: ChromiumRedirect
) -> OAuthClientProvider:
    """A new SDK client over the same storage. The SDK (mcp 2.3.0) loads the tokens and the client
    itself, but neither when the access token expires (it would send an expired token, and on the
    401 authorize in the browser again) nor where the token endpoint is (before discovery it
    refreshes at the MCP server's origin + `/token`, handing the refresh token to the resource
    server), so the application gives both back from what it stored."""
    provider = sdk_provider(demo, storage, redirect)
    stored = storage.read()
    provider.context.token_expiry_time = stored["expires_at"]
    provider.context.oauth_metadata = OAuthMetadata.model_validate(stored["authorization_server"])
    return provider


@asynccontextmanager
async def session(demo: Demo, auth: httpx2.Auth, traffic: Traffic) -> AsyncIterator[ClientSession]:
    hooks = {"request": [traffic.on_request], "response": [traffic.on_response]}
    async with (
        httpx2.AsyncClient(auth=auth, timeout=60, event_hooks=hooks) as http,  # type: ignore[arg-type]
        streamable_http_client(demo.resource, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


@pytest.fixture
def chromium_person(demo: Demo) -> Iterator[PersonThread]:
    """A person at a Chromium of their own: the first visit shows the login form."""
    with person_in_chromium("demo", demo_password(demo)) as person:
        yield person


async def test_the_python_sdk_client_signs_in_in_chromium_steps_up_and_refreshes_after_a_restart(
    demo: Demo, chromium_person: PersonThread, tmp_path: Path
) -> None:
    listener = CallbackListener()
    storage = FileTokenStorage(tmp_path / "sdk-client.json")
    redirect = ChromiumRedirect(chromium_person, listener)
    user_id = demo_user_id(demo)
    try:
        # 1-3: first authorization, a tool call, the step-up, in one client object
        traffic = Traffic()
        provider = sdk_provider(demo, storage, redirect)
        async with session(demo, provider, traffic) as client:
            first = text(await client.call_tool("whoami", {}))
            reset = text(await client.call_tool("reset_counter", {}))
            widened = text(await client.call_tool("whoami", {}))
        client_id = provider.context.client_info.client_id  # type: ignore[union-attr]
        storage.remember_metadata(provider)
        before_restart = storage.read()["tokens"]
        pages_before_restart = chromium_person.person.pages_opened

        # 4: a new client object over the stored tokens, whose access token has expired
        document = storage.read()
        document["expires_at"] = time.time() - 1
        storage.write(document)
        restarted_traffic = Traffic()
        restarted = restarted_provider(demo, storage, redirect)
        async with session(demo, restarted, restarted_traffic) as client:
            after_restart = text(await client.call_tool("whoami", {}))
    finally:
        listener.close()

    # the first authorization: discovery, one registration, login and consent in Chromium
    assert [e.status for e in traffic.to(demo.prm)] == [200]
    assert [e.status for e in traffic.to(f"{demo.issuer}/register")] == [201]
    first_trip, step_up = redirect.trips
    for trip in redirect.trips:
        assert trip.problems() == [], trip
    assert first_trip.pages == ["login", "consent"]
    assert first_trip.params["code_challenge_method"] == "S256"
    assert first_trip.params["scope"] == "mcp:tools"
    assert first_trip.callback["iss"] == demo.issuer
    assert first == f"subject={user_id} client={client_id} scopes=mcp:tools"
    # the step-up: 403 insufficient_scope, the consent page again (the session spares the login)
    [refused] = [e for e in traffic.exchanges if e.status == 403]
    assert refused.challenge.startswith('Bearer error="insufficient_scope"')
    assert scope_param(refused.challenge) == {"mcp:tools", "mcp:admin"}
    assert step_up.pages == ["consent"]
    assert "mcp:admin" in step_up.consent_text
    assert set(step_up.params["scope"].split()) == {"mcp:tools", "mcp:admin"}
    assert step_up.params["client_id"] == client_id
    assert reset == "counter reset"
    assert widened == f"subject={user_id} client={client_id} scopes=mcp:tools mcp:admin"
    assert [e.status for e in traffic.grants("authorization_code")] == [200, 200]
    # after the restart: one refresh with the stored refresh token, no browser, no 401
    assert len(redirect.trips) == 2
    assert chromium_person.person.pages_opened == pages_before_restart
    [refreshed] = restarted_traffic.grants("refresh_token")
    assert refreshed.url == f"{demo.issuer}/token"
    assert refreshed.status == 200
    assert refreshed.form["refresh_token"] == before_restart["refresh_token"]
    assert not restarted_traffic.grants("authorization_code")
    assert not [e for e in restarted_traffic.exchanges if e.status in (401, 403)]
    new_access = refreshed.body["access_token"]
    assert new_access != before_restart["access_token"]
    assert storage.read()["tokens"]["access_token"] == new_access
    mcp_calls = [e for e in restarted_traffic.to(demo.resource) if e.method == "POST"]
    assert {e.authorization for e in mcp_calls} == {f"Bearer {new_access}"}
    assert after_restart == widened


# --------------------------------------------------------------------------------------------
# (b) `mcpauth login` and `mcpauth token`, the browser opened through $BROWSER


@dataclass
class CLI:
    """`mcpauth login|token URL --store FILE` with `$BROWSER` set to the Chromium opener, which
    appends one JSON line per browser trip to `log`."""

    demo: Demo
    store: Path
    log: Path
    env: dict[str, str]
    cwd: Path

    def run(self, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        """The CLI as its own process group (the opener it starts included), killed when late."""
        command = [MCPAUTH, *args, "--store", str(self.store)]
        process = subprocess.Popen(
            command,
            env=self.env,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate(timeout=10)
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    def trips(self, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The opener's records once there are ``count`` (it may finish after the CLI exits)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.log.read_text().splitlines() if self.log.exists() else []
            if len(lines) >= count or time.monotonic() > deadline:
                return [json.loads(line) for line in lines]
            time.sleep(0.05)

    def stored_tokens(self) -> dict[str, Any]:
        [tokens] = json.loads(self.store.read_text())["tokens"].values()
        return dict(tokens)


@pytest.fixture
def cli(demo: Demo, tmp_path: Path) -> CLI:
    log = tmp_path / "opener.jsonl"
    env = {
        **demo.env,
        "MCPAUTH_CHROMIUM": chromium.executable(),  # (skips when this machine has none)
        "PYTHONPATH": str(ROOT),
        "BROWSER": f"{sys.executable} -m tests.e2e.chromium_opener %s",
        "CHROMIUM_OPENER_LOG": str(log),
        "CHROMIUM_OPENER_USERNAME": "demo",
        "CHROMIUM_OPENER_PASSWORD": demo_password(demo),
    }
    return CLI(demo, tmp_path / "client.json", log, env, tmp_path)


@asynccontextmanager
async def bearer_session(demo: Demo, token: str) -> AsyncIterator[ClientSession]:
    """The official SDK client session with a fixed token, as a script uses `mcpauth token`."""
    headers = {"authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(demo.resource, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def call_without_session(demo: Demo, token: str, tool: str) -> httpx2.Response:
    """`tools/call` as one plain POST: what a script sees when the token lacks a scope."""
    return httpx2.post(
        demo.resource,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool}},
        headers={
            "authorization": f"Bearer {token}",
            "accept": "application/json, text/event-stream",
        },
        timeout=30,
    )


async def test_mcpauth_login_in_chromium_then_token_calls_a_tool_steps_up_with_scope_and_refreshes(
    demo: Demo, cli: CLI
) -> None:
    user_id = demo_user_id(demo)
    # 1: `mcpauth login URL`: discovery, registration, PKCE, the browser, the loopback callback
    login = cli.run("login", demo.resource, "--timeout", "60")
    assert login.returncode == 0, login.stderr
    [first] = cli.trips(1)
    assert not first["error"], first
    assert first["pages"] == ["login", "consent"]
    assert first["listener_closed"], "the CLI must finish while the browser stays open"
    assert first["params"]["code_challenge_method"] == "S256"
    assert first["params"]["resource"] == demo.resource
    assert first["params"]["scope"] == "mcp:tools"
    assert first["landed"].startswith(first["params"]["redirect_uri"] + "?")
    callback = query(first["landed"])
    assert set(callback) == {"code", "state", "iss"}
    assert callback["iss"] == demo.issuer
    client_id = first["params"]["client_id"]

    # 2: `mcpauth token URL` prints the token; a real MCP session calls whoami with it
    token = cli.run("token", demo.resource)
    assert token.returncode == 0, token.stderr
    access = token.stdout.strip()
    async with bearer_session(demo, access) as client:
        whoami = text(await client.call_tool("whoami", {}))
    assert whoami == f"subject={user_id} client={client_id} scopes=mcp:tools"

    # 3: reset_counter is refused for mcp:admin; `mcpauth login URL --scope mcp:admin` steps up
    refused = call_without_session(demo, access, "reset_counter")
    assert refused.status_code == 403
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope"')
    assert scope_param(challenge) == {"mcp:tools", "mcp:admin"}
    step_up = cli.run("login", demo.resource, "--scope", "mcp:admin", "--timeout", "60")
    assert step_up.returncode == 0, step_up.stderr
    _, second = cli.trips(2)
    assert not second["error"], second
    assert second["pages"] == ["login", "consent"]  # a new browser: no session cookie yet
    assert second["listener_closed"]
    assert "mcp:admin" in second["consent_text"]
    assert set(second["params"]["scope"].split()) == {"mcp:tools", "mcp:admin"}
    assert second["params"]["client_id"] == client_id  # the stored registration, reused
    widened = cli.run("token", demo.resource)
    assert widened.returncode == 0, widened.stderr
    admin_access = widened.stdout.strip()
    async with bearer_session(demo, admin_access) as client:
        reset = text(await client.call_tool("reset_counter", {}))
        whoami_admin = text(await client.call_tool("whoami", {}))
    assert reset == "counter reset"
    assert whoami_admin == f"subject={user_id} client={client_id} scopes=mcp:admin mcp:tools"

    # 4: the stored access token has expired; the next `mcpauth token` (a new process, not
    # allowed to sign in) refreshes it with the stored refresh token, without a browser
    stored = cli.stored_tokens()
    assert stored["access_token"] == admin_access
    document = json.loads(cli.store.read_text())
    for entry in document["tokens"].values():
        entry["expires_at"] = time.time() - 1
    cli.store.write_text(json.dumps(document))
    refreshed = cli.run("token", demo.resource)
    assert refreshed.returncode == 0, refreshed.stderr
    new_access = refreshed.stdout.strip()
    assert new_access != admin_access
    renewed = cli.stored_tokens()
    assert renewed["access_token"] == new_access
    assert renewed["refresh_token"] != stored["refresh_token"]  # rotated by the refresh grant
    assert renewed["expires_at"] > time.time()
    assert claims(new_access)["jti"] != claims(admin_access)["jti"]
    assert len(cli.trips(2, timeout=0)) == 2, "the refresh must not open a browser"
    async with bearer_session(demo, new_access) as client:
        assert text(await client.call_tool("whoami", {})) == whoami_admin


def test_mcpauth_login_reports_a_denial_clicked_in_chromium_and_stores_no_token(cli: CLI) -> None:
    cli.env["CHROMIUM_OPENER_ACTION"] = "deny"
    login = cli.run("login", cli.demo.resource, "--timeout", "60")
    [trip] = cli.trips(1)

    assert login.returncode == 4, login.stderr  # authorization failed or was denied
    assert "access_denied" in login.stderr
    assert trip["pages"] == ["login", "consent"]
    back = query(trip["landed"])
    assert back["error"] == "access_denied"
    assert back["iss"] == cli.demo.issuer
    assert back["state"] == trip["params"]["state"]
    assert "code" not in back
    assert not json.loads(cli.store.read_text())["tokens"]
    token = cli.run("token", cli.demo.resource)
    assert token.returncode == 3, token.stderr  # login required


# --------------------------------------------------------------------------------------------
# (c) the official TypeScript SDK client, `tests/e2e/node/mcp_oauth_client.mjs`


def pump(stream: Any, lines: queue.Queue[str | None]) -> None:
    """Every line of ``stream`` into ``lines``, then None."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


@dataclass
class NodeClient:
    """Runs the Node script (a new client process each time) over one token file; each
    `authorize` event it prints is handed to the person at Chromium."""

    node: Path
    peers: Path
    demo: Demo
    store: Path
    cwd: Path

    def run(self, *tools: str, person: PersonThread | None, timeout: float = 90.0) -> list[Any]:
        """The events the script printed, and the person's trips in between."""
        command = [str(self.node), str(ROOT / "tests/e2e/node/mcp_oauth_client.mjs")]
        command += ["--peers", str(self.peers), "--server", self.demo.resource]
        command += ["--store", str(self.store), "--timeout", "60"]
        for tool in tools:
            command += ["--call", tool]
        errors = self.cwd / f"node-{time.monotonic_ns()}.stderr"
        lines: queue.Queue[str | None] = queue.Queue()
        events: list[Any] = []
        with errors.open("w") as stderr:
            process = subprocess.Popen(
                command,
                cwd=self.cwd,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                start_new_session=True,
            )
            assert process.stdout is not None
            reader = threading.Thread(target=pump, args=(process.stdout, lines))
            reader.start()
            deadline = time.monotonic() + timeout
            try:
                while (
                    line := lines.get(timeout=max(0.0, deadline - time.monotonic()))
                ) is not None:
                    event = json.loads(line)
                    events.append(event)
                    if event["event"] == "authorize":
                        assert person is not None, "this run must not need a browser"
                        events.append(person.authorize(event["url"]))
                process.wait(timeout=left(deadline))
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)
                reader.join(timeout=10)
        assert process.returncode == 0, errors.read_text()
        assert "[mcp-sdk]" not in errors.read_text()  # the SDK's warnings (failed refresh, ...)
        return events

    def stored(self) -> dict[str, Any]:
        return dict(json.loads(self.store.read_text()))


@pytest.fixture(scope="module")
def npm_peers() -> tuple[Path, Path]:
    """Node 22 and the pinned TypeScript SDK client, installed when missing."""
    chromium.executable()  # no need to install anything when this machine has no browser
    return ROOT / ".node22/node_modules/.bin/node", ensure_npm_peers()


def of(events: list[Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e, dict) and e["event"] == kind]


def test_the_typescript_sdk_client_signs_in_in_chromium_steps_up_and_refreshes_when_run_again(
    demo: Demo, npm_peers: tuple[Path, Path], tmp_path: Path
) -> None:
    node, peers = npm_peers
    client = NodeClient(node, peers, demo, tmp_path / "typescript-client.json", tmp_path)
    user_id = demo_user_id(demo)

    # 1-3: the first authorization, whoami, the step-up for reset_counter, whoami again
    with person_in_chromium("demo", demo_password(demo)) as person:
        events = client.run("whoami", "reset_counter", "whoami", person=person)
    trips = [e for e in events if isinstance(e, Trip)]
    assert [trip.pages for trip in trips] == [["login", "consent"], ["consent"]]
    assert all(not trip.error for trip in trips), [trip.error for trip in trips]
    first, step_up = trips
    stored = client.stored()
    client_id = stored["client"]["client_id"]
    assert first.params["client_id"] == step_up.params["client_id"] == client_id
    assert first.params["code_challenge_method"] == "S256"
    assert first.params["resource"] == demo.resource
    assert first.callback["iss"] == demo.issuer
    assert set(step_up.params["scope"].split()) == {"mcp:tools", "mcp:admin"}
    assert "mcp:admin" in step_up.consent_text
    assert [e["params"] for e in of(events, "callback")] == [["code", "iss", "state"]] * 2
    [refused] = [e for e in of(events, "http") if e["status"] == 403]
    assert refused["www_authenticate"].startswith('Bearer error="insufficient_scope"')
    assert scope_param(refused["www_authenticate"]) == {"mcp:tools", "mcp:admin"}
    assert [(e["grant_type"], e["status"]) for e in of(events, "token")] == [
        ("authorization_code", 200),
        ("authorization_code", 200),
    ]
    tools = [(e["name"], e["text"], e["is_error"]) for e in of(events, "tool")]
    widened = f"subject={user_id} client={client_id} scopes=mcp:tools mcp:admin"
    assert tools == [
        ("whoami", f"subject={user_id} client={client_id} scopes=mcp:tools", False),
        ("reset_counter", "counter reset", False),
        ("whoami", widened, False),
    ]

    # 4: the script run again (a restarted client) with the stored tokens. The TypeScript SDK
    # keeps no expiry of its own and refreshes when the resource server answers 401, so the
    # stored access token is replaced by one the server refuses (its signature altered), as it
    # refuses an expired one; the client must refresh with the stored refresh token, no browser.
    old_access, old_refresh = stored["tokens"]["access_token"], stored["tokens"]["refresh_token"]
    head, _, signature = old_access.rpartition(".")
    refused_access = f"{head}.{signature[::-1]}"
    stored["tokens"]["access_token"] = refused_access
    client.store.write_text(json.dumps(stored))
    again = client.run("whoami", person=None)

    assert not of(again, "authorize")
    assert [e["status"] for e in of(again, "http")] == [401]
    assert [(e["grant_type"], e["status"]) for e in of(again, "token")] == [("refresh_token", 200)]
    assert [e["text"] for e in of(again, "tool")] == [widened]
    renewed = client.stored()["tokens"]
    assert renewed["access_token"] not in (old_access, refused_access)
    assert renewed["refresh_token"] != old_refresh  # rotated by the refresh grant
    assert claims(renewed["access_token"])["sub"] == user_id
