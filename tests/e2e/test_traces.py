"""Traces exported by real processes to a real OTLP/HTTP receiver on 127.0.0.1 (protobuf
``ExportTraceServiceRequest``s, decoded with opentelemetry-proto), configured only by
``OTEL_*`` variables: `mcpauth serve` and `mcpauth proxy` (in front of the official SDK's
server) while a client registers, signs a person in through the forms, redeems the code with
PKCE, refreshes and calls tools. Every step arrives as a span with its attributes; the client's
``traceparent`` runs through the token endpoint, and through the proxy to the upstream server;
and none of the flow's tokens, codes, secrets, passwords, proofs, cookies or form tokens is in
any exported byte. With ``OTEL_TRACES_EXPORTER=none`` nothing is exported and the SDK is never
imported."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from ..middleware.e2e.conftest import SERVE, listening_socket
from ..oauth import forms, pkce_pair, query
from ..support import free_port
from ..traces import PARENT_ID, TRACE_ID, TRACEPARENT, OTLPReceiver, Span, no_credential_in
from .test_authorization_flow import (
    PASSWORD,
    RESOURCE,
    SECRET_KEY,
    AuthServer,
    Browser,
    auth_server,
    authorization_url,
    register_public_client,
)

pytestmark = pytest.mark.e2e


class RecordingBrowser(Browser):
    """The forms' hidden values and actions (CSRF tokens, interaction ids) noted as it goes."""

    def __init__(self, issuer: str) -> None:
        super().__init__(issuer)
        self.hidden: list[str] = []

    def submit(self, page: httpx2.Response, values: dict[str, str]) -> httpx2.Response:
        form = forms(page.text)[0]
        self.hidden += [value for name, value in form.fields.items() if "csrf" in name]
        self.hidden += [part for part in form.action.split("/") if len(part) >= 16]
        return super().submit(page, values)


@contextmanager
def process(args: list[str], env: dict[str, str]) -> Iterator[str]:
    """``args`` serving on a listening socket it inherits (``--fd``); yields its URL."""
    sock = listening_socket()
    popen = subprocess.Popen(
        [*args, "--fd", str(sock.fileno())],
        pass_fds=(sock.fileno(),),
        env={**os.environ, **env},
    )
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        popen.terminate()
        try:
            popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout=10)
        sock.close()


def mcp(
    url: str, message: dict[str, Any], token: str | None, **headers: str
) -> tuple[httpx2.Response, dict[str, Any] | None]:
    """One JSON-RPC POST to the MCP endpoint; the answer, from JSON or an SSE stream."""
    sent = {"accept": "application/json, text/event-stream", **headers}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    response = httpx2.post(url, json=message, headers=sent, timeout=30)
    if response.status_code != 200 or "id" not in message:
        return response, None
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return response, json.loads(data[-1])
    return response, response.json()


def sign_in_and_get_tokens(
    server: AuthServer, browser: RecordingBrowser, found: dict[str, str]
) -> tuple[str, dict[str, Any]]:
    """Register, authorize through the forms, redeem the code (with the client's
    ``traceparent``) and refresh; every secret used goes in ``found``."""
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    client_id = register_public_client(server, redirect_uri)
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(16)
    back, shown = browser.authorize(
        authorization_url(server, client_id, redirect_uri, challenge, state)
    )
    assert shown == ["login", "consent"]
    code = query(back.headers["location"])["code"]
    exchanged = httpx2.post(
        server.token_endpoint,
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            "client_id": client_id,
            "resource": RESOURCE,
        },
        headers={"traceparent": TRACEPARENT},
        timeout=30,
    )
    assert exchanged.status_code == 200, exchanged.text
    tokens = exchanged.json()
    refreshed = httpx2.post(
        server.token_endpoint,
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": client_id,
        },
        timeout=30,
    )
    assert refreshed.status_code == 200, refreshed.text
    found.update(
        {
            "code": code,
            "code verifier": verifier,
            "state": state,
            "first access token": tokens["access_token"],
            "first refresh token": tokens["refresh_token"],
            "access token": refreshed.json()["access_token"],
            "refresh token": refreshed.json()["refresh_token"],
        }
    )
    found.update({f"cookie {name}": value for name, value in browser.http.cookies.items()})
    found.update({f"form value {i}": value for i, value in enumerate(browser.hidden)})
    return client_id, refreshed.json()


def call_tools(proxy: str, token: str, found: dict[str, str]) -> str:
    """Initialize, call trace_context with the client's ``traceparent`` (what the upstream got
    is returned), be refused a tool (403) and refused without a token and with a forged one
    and a proof (401)."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "trace-test", "version": "1"},
        },
    }
    response, answer = mcp(proxy, initialize, token)
    assert answer is not None, response.text
    session = {
        "mcp-session-id": response.headers["mcp-session-id"],
        "mcp-protocol-version": answer["result"]["protocolVersion"],
    }
    found["session id"] = session["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert mcp(proxy, initialized, token, **session)[0].status_code == 202
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "trace_context", "arguments": {}},
    }
    response, answer = mcp(proxy, call, token, traceparent=TRACEPARENT, **session)
    assert answer is not None, response.text
    received = str(answer["result"]["content"][0]["text"])
    refused = {**call, "id": 3, "params": {"name": "delete_file", "arguments": {"path": "/x"}}}
    assert mcp(proxy, refused, token, **session)[0].status_code == 403
    forged = token[:-6] + "AAAAAA"
    proof = "eyJ0eXAiOiJkcG9wK2p3dCJ9." + secrets.token_urlsafe(32) + ".proof"
    found.update({"forged token": forged, "DPoP proof": proof})
    assert mcp(proxy, {**call, "id": 4}, forged, dpop=proof, **session)[0].status_code == 401
    assert mcp(proxy, {**call, "id": 5}, None)[0].status_code == 401
    return received


def _flow_arrived(spans: list[Span]) -> bool:
    server = [s for s in spans if s.service == "mcpauth-server"]
    proxy = [s for s in spans if s.service == "mcpauth-proxy"]
    decisions = [s.attributes.get("mcpauth.decision") for s in proxy]
    return (
        sum(s.name == "POST /token" for s in server) == 2
        and any(s.name == "POST /interaction/{interaction_id}/consent" for s in server)
        and decisions.count("unauthorized") == 2
        and {"allowed", "forbidden"} <= set(decisions)
        and any(s.kind == "CLIENT" and s.trace_id == TRACE_ID for s in proxy)
    )


def test_a_flow_exports_a_span_per_step_with_the_callers_trace_and_no_credential(
    tmp_path: Path,
) -> None:
    found = {"password": PASSWORD, "server secret key": SECRET_KEY}
    with (
        OTLPReceiver() as receiver,
        auth_server(tmp_path, extra_env=receiver.env("mcpauth-server")) as server,
        process([sys.executable, str(SERVE), "mcp", "--unprotected"], {}) as upstream,
        process(
            [
                sys.executable, "-m", "mcpauth.proxy.cli", "--resource", RESOURCE,
                "--authorization-server", server.issuer, "--upstream", f"{upstream}/mcp",
                "--scope", "mcp:read", "--tool-scope", "delete_file=files:write",
            ],
            receiver.env("mcpauth-proxy"),
        ) as proxy,
        RecordingBrowser(server.issuer) as browser,
    ):  # fmt: skip
        client_id, tokens = sign_in_and_get_tokens(server, browser, found)
        received = call_tools(f"{proxy}/mcp", tokens["access_token"], found)
        receiver.wait_for(_flow_arrived)
        spans = receiver.spans()
        raw = list(receiver.raw)

    ours = [s for s in spans if s.service in ("mcpauth-server", "mcpauth-proxy")]
    assert ours == spans  # nothing else exports here
    server_spans = [s for s in spans if s.service == "mcpauth-server"]
    names = {s.name for s in server_spans}
    assert {
        "GET /.well-known/oauth-authorization-server",
        "POST /register",
        "GET /authorize",
        "GET /interaction/{interaction_id}",
        "POST /interaction/{interaction_id}/login",
        "POST /interaction/{interaction_id}/consent",
        "POST /token",
    } <= names
    exchange = next(s for s in server_spans if s.trace_id == TRACE_ID)
    assert exchange.name == "POST /token"
    assert exchange.parent_id == PARENT_ID
    assert exchange.attributes["mcpauth.oauth.grant_type"] == "authorization_code"
    assert exchange.attributes["mcpauth.oauth.client_id"] == client_id
    assert exchange.attributes["mcpauth.oauth.resource"] == RESOURCE
    assert exchange.attributes["http.response.status_code"] == 200
    refresh = next(
        s for s in server_spans if s.attributes.get("mcpauth.oauth.grant_type") == "refresh_token"
    )
    assert refresh.attributes["mcpauth.oauth.client_id"] == client_id
    assert "error.type" not in refresh.attributes

    proxy_spans = [s for s in spans if s.service == "mcpauth-proxy"]
    call = next(s for s in proxy_spans if s.attributes.get("gen_ai.tool.name") == "trace_context")
    assert call.name == "POST /mcp"
    assert (call.trace_id, call.parent_id) == (TRACE_ID, PARENT_ID)
    assert call.attributes["mcp.method.name"] == "tools/call"
    assert call.attributes["mcpauth.decision"] == "allowed"
    assert call.attributes["mcpauth.oauth.client_id"] == client_id
    assert call.attributes["http.response.status_code"] == 200
    outgoing = next(s for s in proxy_spans if s.kind == "CLIENT" and s.trace_id == TRACE_ID)
    assert outgoing.parent_id == call.span_id
    assert outgoing.attributes["url.full"] == f"{upstream}/mcp"
    # the upstream server got the trace, its parent the proxy's request
    assert received == f"00-{TRACE_ID}-{outgoing.span_id}-01"

    forbidden = next(s for s in proxy_spans if s.attributes.get("mcpauth.decision") == "forbidden")
    assert forbidden.attributes["error.type"] == "insufficient_scope"
    assert forbidden.attributes["gen_ai.tool.name"] == "delete_file"
    unauthorized = [
        s for s in proxy_spans if s.attributes.get("mcpauth.decision") == "unauthorized"
    ]
    assert len(unauthorized) == 2
    assert {s.attributes["error.type"] for s in unauthorized} == {"invalid_token"}

    no_credential_in(spans, found)
    for name, secret in found.items():
        assert not any(secret.encode() in body for body in raw), f"the {name} was exported"


OFF_OR_ON = """
import asyncio, json, sys, tempfile
import httpx2
from mcpauth.middleware import ProtectedResourceMiddleware
from mcpauth.server import Settings, create_app

folder = tempfile.mkdtemp()
app = create_app(Settings(issuer="http://127.0.0.1:9000", database_url=f"sqlite:///{folder}/a.db",
                          secret_key="off-or-on-secret-0123456789abcdef"))

async def inner(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})

protected = ProtectedResourceMiddleware(inner, resource="https://mcp.example.com/mcp",
                                        authorization_servers=["https://as.example.com"])

async def main():
    for target in (app, protected):
        transport = httpx2.ASGITransport(app=target)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:9000") as c:
            await c.post("/token", data={"grant_type": "client_credentials"})
            await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})

asyncio.run(main())
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
"""


@pytest.mark.parametrize("exporter", ["none", "otlp"])
def test_with_the_exporter_none_nothing_is_exported_and_the_sdk_never_imported(
    exporter: str, tmp_path: Path
) -> None:
    with OTLPReceiver() as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(receiver.env("off-or-on"), OTEL_TRACES_EXPORTER=exporter)
        result = subprocess.run(
            [sys.executable, "-c", OFF_OR_ON],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        imported = json.loads(result.stdout.strip().splitlines()[-1])
        spans = receiver.spans()  # the process has ended: the SDK flushed at exit
    if exporter == "none":
        assert spans == []
        assert imported == []
    else:  # the same process with traces on: the receiver would have seen them
        assert {s.name for s in spans} == {"POST /token", "POST /mcp", "POST"}
        assert "opentelemetry.sdk.trace" in imported
