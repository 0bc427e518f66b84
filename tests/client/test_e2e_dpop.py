"""DPoP end to end with the real authorization server (docs/security.md T30): ``mcpauth
serve`` as a process, a person signing in through the loopback redirect, and a small resource
that accepts only DPoP and checks each request with ``mcpauth.dpop.check_proof`` (the token's
signature against the server's JWKS, then ``ath``, the key in ``cnf.jkt``, its own nonce and
single-use ``jti``). The client helper gets a bound token without being told to (the server's
metadata offers DPoP), answers the resource's nonce, refreshes with the same key from its
store; a refresh with another key, or with none, is refused and spends nothing."""

from __future__ import annotations

import io
import json
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpauth import jwt
from mcpauth.client import FileStorage, OAuth, Policy
from mcpauth.client import callback as callback_module
from mcpauth.client.callback import LoopbackRedirectHandler
from mcpauth.client.proofs import DPoPKey
from mcpauth.dpop import DPoPNonces, check_proof
from mcpauth.errors import InvalidDPoPProof, InvalidToken, UseDPoPNonce
from tests.client.browser import visit
from tests.client.fakes import serve
from tests.support import MCPAUTH, free_port, run_cli, running

pytestmark = pytest.mark.e2e

USER, PASSWORD = "alice", "correct horse battery"
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@dataclass
class DPoPResource:
    """An MCP endpoint that takes DPoP-bound tokens only; records the key of each request."""

    resource: str
    issuer: str
    nonces: DPoPNonces = field(default_factory=lambda: DPoPNonces(b"resource-nonce-key-0123456789"))
    keys: dict[str, jwt.VerificationKey] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)  # "refused: <error>" or the proof's jkt
    jtis: set[str] = field(default_factory=set)

    def refuse(self, error: str | None, **headers: str) -> Response:
        self.seen.append(f"refused: {error}")
        params = [f'error="{error}"'] if error else []
        params += ['algs="ES256 EdDSA"', f'resource_metadata="{self.resource}/prm"']
        headers["www-authenticate"] = "DPoP " + ", ".join(params)
        return JSONResponse({"error": error or "invalid_token"}, 401, headers=headers)

    async def claims(self, token: str) -> dict[str, Any]:
        if not self.keys:
            async with httpx2.AsyncClient(timeout=10) as http:
                metadata = (
                    await http.get(f"{self.issuer}/.well-known/oauth-authorization-server")
                ).json()
                self.keys = jwt.key_set((await http.get(metadata["jwks_uri"])).json())
        return jwt.verify(token, self.keys, issuer=self.issuer, audience=self.resource)

    async def mcp(self, request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "dpop" or not token:
            return self.refuse(None)
        try:
            claims = await self.claims(token)
            proof = check_proof(
                request.headers.getlist("dpop"),
                method=request.method,
                url=self.resource,
                access_token=token,
                jkt=str(claims.get("cnf", {}).get("jkt", "")),
                nonce=self.nonces.current(time.time()),
            )
        except InvalidToken:
            return self.refuse("invalid_token")
        except UseDPoPNonce:
            nonce = self.nonces.current(time.time())
            return self.refuse("use_dpop_nonce", **{"dpop-nonce": nonce})
        except InvalidDPoPProof:
            return self.refuse("invalid_dpop_proof")
        if proof.jti in self.jtis:
            return self.refuse("invalid_dpop_proof")
        self.jtis.add(proof.jti)
        self.seen.append(proof.jkt)
        return JSONResponse({"jsonrpc": "2.0", "id": 1, "result": {}})

    async def prm(self, request: Request) -> Response:
        return JSONResponse({"resource": self.resource, "authorization_servers": [self.issuer]})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/mcp", self.mcp, methods=["POST"]),
                Route("/mcp/prm", self.prm),
                Route("/.well-known/oauth-protected-resource/mcp", self.prm),
            ]
        )


@dataclass
class Stack:
    issuer: str
    resource: DPoPResource
    token_endpoint: str


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path)}
    issuer = f"http://127.0.0.1:{free_port()}"
    made: list[DPoPResource] = []

    def factory(base: str) -> Starlette:
        made.append(DPoPResource(f"{base}/mcp", issuer))
        return made[0].app()

    with serve(factory=factory):
        resource = made[0]
        for args in (
            ["users", "add", USER, "--password-stdin"],
            ["resources", "add", resource.resource, "--scope", "tools:read",
             "--default-scope", "tools:read"],
        ):  # fmt: skip
            done = run_cli(args, env=env, stdin=f"{PASSWORD}\n", cwd=tmp_path)
            assert done.returncode == 0, done.stderr
        port = issuer.rsplit(":", 1)[1]
        serve_args = [MCPAUTH, "serve", "--issuer", issuer, "--port", port]
        ready = f"{issuer}/.well-known/oauth-authorization-server"
        with running(serve_args, ready_url=ready, env=env, cwd=tmp_path):
            metadata = httpx2.get(ready, timeout=10).json()
            assert "ES256" in metadata["dpop_signing_alg_values_supported"]
            yield Stack(issuer, resource, metadata["token_endpoint"])


class Clock:
    """The client's clock, moved forward to make it refresh."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def client(stack: Stack, store: Path, clock: Clock) -> OAuth:
    handler = LoopbackRedirectHandler(timeout=30, out=io.StringIO())
    return OAuth(
        stack.resource.resource,
        storage=FileStorage(store),
        redirect_handler=handler,
        policy=Policy(clock=clock),
    )


def refresh_with(stack: Stack, auth: OAuth, key: DPoPKey | None) -> httpx2.Response:
    """The client's current refresh token at the token endpoint, proved with ``key``."""
    assert auth.tokens is not None
    assert auth.tokens.refresh_token is not None
    assert auth.flow.client is not None
    form = {
        "grant_type": "refresh_token",
        "refresh_token": auth.tokens.refresh_token,
        "client_id": auth.flow.client.client_id,
        "resource": stack.resource.resource,
    }
    headers = {} if key is None else {"dpop": key.proof("POST", stack.token_endpoint)}
    return httpx2.post(stack.token_endpoint, data=form, headers=headers, timeout=10)


def test_a_bound_token_from_mcpauth_serve_refreshed_with_its_key_and_only_with_it(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signed_in: list[str] = []

    def browser(url: str) -> bool:
        signed_in.append(url)
        visit(url, USER, PASSWORD)
        return True

    monkeypatch.setattr(callback_module.webbrowser, "open", browser)
    store, clock, resource = tmp_path / "client.json", Clock(), stack.resource
    auth = client(stack, store, clock)
    with httpx2.Client(auth=auth, timeout=30) as http:
        assert http.post(resource.resource, json=PING).status_code == 200
        key = auth.flow.dpop_key
        assert key is not None
        assert auth.tokens is not None
        assert auth.tokens.bound
        first = auth.tokens
        # no token; the bound token without the resource's nonce; with it
        assert resource.seen == ["refused: None", "refused: use_dpop_nonce", key.thumbprint]
        assert http.post(resource.resource, json=PING).status_code == 200  # nonce remembered
        assert resource.seen[3:] == [key.thumbprint]

        # the token copied without the key: a proof of another key is refused
        thief = DPoPKey.generate()
        stolen = {
            "authorization": f"DPoP {first.access_token}",
            "dpop": thief.proof("POST", resource.resource, access_token=first.access_token),
        }
        assert httpx2.post(resource.resource, json=PING, headers=stolen).status_code == 401

        # someone else's key, or none, cannot refresh it, and the attempts spend nothing
        for other in (thief, None):
            refused = refresh_with(stack, auth, other)
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"] == "invalid_dpop_proof"

        clock.offset = 7 * 24 * 3600  # long past the access token's lifetime: refresh first
        assert http.post(resource.resource, json=PING).status_code == 200
        renewed = auth.tokens
        assert renewed is not None
        assert renewed.bound
        assert renewed.access_token != first.access_token
        assert renewed.refresh_token != first.refresh_token  # rotated
        assert resource.seen[-1] == key.thumbprint  # the new token is bound to the same key
    assert len(signed_in) == 1

    # the key lives in the 0600 store with the tokens: the next process uses both
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert list(json.loads(store.read_text())["dpop_keys"]) == [stack.issuer]
    with httpx2.Client(auth=client(stack, store, clock), timeout=30) as http:
        assert http.post(resource.resource, json=PING).status_code == 200
    assert resource.seen[-1] == key.thumbprint
    assert len(signed_in) == 1
