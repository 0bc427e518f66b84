"""What the client flow keeps for DPoP while it runs (RFC 9449): the key of the current
authorization server, the newest ``DPoP-Nonce`` of each server, the algorithms the resource's
DPoP challenge offered, the proof that goes with a token request (retried once with the
server's nonce) and with each request to the MCP server."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from mcpauth.client._http import HTTPRequest, HTTPResponse
from mcpauth.client.challenge import offered_dpop_algs, parse_challenges
from mcpauth.client.errors import TokenRequestFailed
from mcpauth.client.proofs import ALGORITHMS, DPoPKey, choose_algorithm
from mcpauth.uris import origin


class DPoPState:
    def __init__(self) -> None:
        self.key: DPoPKey | None = None
        self.issuer: str | None = None  # the authorization server ``key`` belongs to
        self._nonces: dict[str, str] = {}  # by origin
        self.resource_algs: list[str] | None = None  # the resource's DPoP challenge's algs

    def note_challenges(self, response: HTTPResponse) -> None:
        """Remember what a resource's refusal offers: a ``DPoP`` challenge means it takes
        DPoP-bound tokens, even when its authorization server's metadata does not say so."""
        if response.status_code in (401, 403):
            algs = offered_dpop_algs(response.challenges)
            if algs is not None:
                self.resource_algs = [a for a in algs if a in ALGORITHMS] if algs else ["ES256"]

    def offered(self, as_algs: list[str] | None) -> list[str] | None:
        """The algorithms to choose from: the authorization server's
        ``dpop_signing_alg_values_supported``, or, when its metadata has none, those of the
        resource's DPoP challenge."""
        return as_algs if as_algs is not None else self.resource_algs

    def key_for(
        self,
        issuer: str,
        offered: list[str] | None,
        mode: str,
        store: Callable[..., Generator[Any, Any, Any]] | None,
    ) -> Generator[Any, Any, DPoPKey | None]:
        """The key to bind ``issuer``'s tokens with, from ``store`` (the storage's
        ``get_dpop_key``/``set_dpop_key``, when it has them) or new; None when DPoP is off or
        not offered. A stored key of another algorithm the server still offers is kept, so
        refresh tokens bound to it stay usable.

        Raises:
            TokenRequestFailed: ``mode`` is ``required`` and the server does not offer DPoP.
        """
        alg = choose_algorithm(offered)
        if mode == "off" or alg is None:
            if mode == "required":
                raise TokenRequestFailed("invalid_request", f"{issuer} does not offer DPoP")
            return None
        accepted = offered or []
        if self.key is not None and self.issuer == issuer and self.key.alg in accepted:
            return self.key
        key = (yield from store("get_dpop_key", issuer)) if store is not None else None
        if not isinstance(key, DPoPKey) or key.alg not in accepted:
            key = DPoPKey.generate(alg)
            if store is not None:
                yield from store("set_dpop_key", issuer, key)
        self.key, self.issuer = key, issuer
        return key

    def remember_nonce(self, url: str, response: HTTPResponse) -> None:
        """Keep a server's newest ``DPoP-Nonce``."""
        nonce = response.headers.get("dpop-nonce")
        if nonce:
            self._nonces[origin(url)] = nonce

    def request_proof(self, token: str) -> Callable[[str, str], str] | None:
        """``proof(method, url)`` for requests carrying the bound ``token``; None without a
        key."""
        key, nonces = self.key, self._nonces
        if key is None:
            return None

        def proof(method: str, url: str) -> str:
            return key.proof(method, url, access_token=token, nonce=nonces.get(origin(url)))

        return proof

    def token_call(
        self, build: Callable[[], HTTPRequest], key: DPoPKey | None
    ) -> Generator[HTTPRequest, HTTPResponse, tuple[HTTPResponse, bool]]:
        """Send the token request ``build`` makes (anew each time: a client assertion in it is
        single use) with a proof of ``key``; a ``use_dpop_nonce`` answer is retried once with
        the nonce (RFC 9449 §8). The response, and whether a proof went with it."""
        response: HTTPResponse | None = None
        for attempt in range(2):
            request = build()
            if key is not None:
                proof = key.proof("POST", request.url, nonce=self._nonces.get(origin(request.url)))
                headers = {**request.headers, "dpop": proof}
                request = HTTPRequest(request.method, request.url, headers, request.body)
            response = yield request
            self.remember_nonce(request.url, response)
            body: dict[str, Any] = response.json_object() or {}
            if key is None or attempt or body.get("error") != "use_dpop_nonce":
                break
        assert response is not None
        return response, key is not None


def asks_for_nonce(response: HTTPResponse) -> bool:
    """A resource's 401 that asks for its DPoP nonce (RFC 9449 §9): a ``DPoP`` challenge with
    ``error="use_dpop_nonce"`` and the nonce in ``DPoP-Nonce``."""
    if response.status_code != 401 or not response.headers.get("dpop-nonce"):
        return False
    return any(
        c.scheme == "dpop" and c.error == "use_dpop_nonce"
        for c in parse_challenges(response.challenges)
    )
