"""Required DPoP with resource-server nonces, end to end with real processes (docs/security.md
T30): two ``mcpauth proxy`` replicas of one resource (``--require-dpop``, the same
``--dpop-nonce-key-env``) in front of the official SDK server; the client knows the resource by
the first replica's URL and talks to the second, as behind a load balancer, so the proof names
the URL the client saw, not the replica's address. The official SDK client gets through with a
proof per request after one nonce refusal; a nonce from one replica works at the other; a
replayed proof, a Bearer token and a copied bound token are refused with their exact errors."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from mcpauth import jwt
from mcpauth.dpop import make_proof
from tests.proxy.test_stdio_limits import INITIALIZE
from tests.proxy.test_stdio_limits import MCP_HEADERS as ACCEPT

from .conftest import Process
from .test_dpop_end_to_end import identity_through
from .test_sdk_end_to_end import mint

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

NONCE_ENV = "MCPAUTH_E2E_DPOP_NONCE_KEY"


class DPoPAuth(httpx2.Auth):
    """A proof of ``key`` for ``resource`` (the URL the client knows) on every request, the
    newest ``DPoP-Nonce`` in it, and one retry when the resource asks for its nonce."""

    requires_request_body = True

    def __init__(self, token: str, key: ec.EllipticCurvePrivateKey, resource: str) -> None:
        self.token, self.key, self.resource = token, key, resource
        self.nonce: str | None = None
        self.statuses: list[tuple[int, str]] = []

    def _sign(self, request: httpx2.Request) -> None:
        proof = make_proof(
            self.key,
            alg="ES256",
            method=request.method,
            url=self.resource,
            access_token=self.token,
            nonce=self.nonce,
        )
        request.headers["Authorization"] = f"DPoP {self.token}"
        request.headers["DPoP"] = proof

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, Any, None]:
        self._sign(request)
        response = yield request
        self.statuses.append((response.status_code, response.headers.get("www-authenticate", "")))
        self.nonce = response.headers.get("dpop-nonce", self.nonce)
        if response.status_code == 401 and "use_dpop_nonce" in response.headers.get(
            "www-authenticate", ""
        ):
            self._sign(request)
            response = yield request
            self.statuses.append((response.status_code, ""))
            self.nonce = response.headers.get("dpop-nonce", self.nonce)


async def test_required_dpop_with_nonces_across_two_proxy_replicas(
    spawn: Callable[..., Process],
    signing_key: tuple[jwt.PrivateKey, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(NONCE_ENV, "a nonce key every replica shares")
    issuer = spawn("as", "--issuer", "{url}", "--key-file", str(signing_key[1])).url
    upstream = spawn("mcp", "--unprotected", path="/mcp")
    options = [
        "--authorization-server", issuer, "--scope", "mcp:basic", "--upstream", upstream.url,
        "--require-dpop", "--dpop-nonce-key-env", NONCE_ENV,
    ]  # fmt: skip
    first = spawn("--resource", "{url}/mcp", *options, module="mcpauth.proxy.cli")
    resource = first.url + "/mcp"
    second = spawn("--resource", resource, *options, module="mcpauth.proxy.cli")
    key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(key.public_key(), kid="", alg="ES256"))
    token = mint(signing_key[0], issuer, resource, cnf={"jkt": jkt})

    # the official SDK client, through the second replica, under the resource's URL
    auth = DPoPAuth(token, key, resource)
    seen = await identity_through(second.url + "/mcp", auth)
    assert seen == "alice|e2e-client|mcp:basic|-|-"  # neither token nor proof went upstream
    assert auth.statuses[0][0] == 401
    assert 'error="use_dpop_nonce"' in auth.statuses[0][1]
    assert all(status < 300 for status, _ in auth.statuses[1:]), auth.statuses

    def headers(nonce: str | None, bound_to: str = token) -> dict[str, str]:
        proof = make_proof(
            key, alg="ES256", method="POST", url=resource, access_token=bound_to, nonce=nonce
        )
        return {**ACCEPT, "Authorization": f"DPoP {bound_to}", "DPoP": proof}

    async with httpx2.AsyncClient(timeout=30) as http:
        # a nonce the first replica hands out is good at the second: nothing is shared but the key
        asked = await http.post(resource, json=INITIALIZE, headers=headers(None))
        assert asked.status_code == 401
        nonce = asked.headers["DPoP-Nonce"]
        once = headers(nonce)
        accepted = await http.post(second.url + "/mcp", json=INITIALIZE, headers=once)
        assert accepted.status_code == 200, accepted.text
        assert accepted.headers["DPoP-Nonce"]
        # the same proof again at the same replica
        replayed = await http.post(second.url + "/mcp", json=INITIALIZE, headers=once)
        # a Bearer token, where DPoP is required, and the bound token copied without its key
        unbound = mint(signing_key[0], issuer, resource)
        as_bearer = await http.post(
            resource, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {unbound}"}
        )
        copied = await http.post(
            resource, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {token}"}
        )
    assert replayed.status_code == 401
    assert replayed.json() == {
        "error": "invalid_dpop_proof",
        "error_description": "The DPoP proof was used before: make a new one per request",
    }
    for refused, description in [
        (as_bearer, "This resource accepts DPoP-bound tokens only"),
        (copied, "This token is DPoP-bound: send it with the DPoP scheme"),
    ]:
        assert refused.status_code == 401
        assert refused.json() == {"error": "invalid_token", "error_description": description}
        challenges = refused.headers.get_list("www-authenticate")
        assert len(challenges) == 1  # DPoP only: no Bearer challenge when DPoP is required
        assert challenges[0].startswith('DPoP error="invalid_token"')
        assert 'algs="ES256 EdDSA RS256 PS256"' in challenges[0]
        assert "resource_metadata=" in challenges[0]
        assert 'scope="mcp:basic"' in challenges[0]
