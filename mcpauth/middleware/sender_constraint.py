"""DPoP at the protected resource (RFC 9449 §7): which tokens must come with a proof, and the
checks of that proof against the request.

A token bound to a key (``cnf.jkt``) is accepted only with the ``DPoP`` scheme and a proof of
that key for this very request: method, URL, the hash of the token (``ath``), a fresh
``iat``, a ``jti`` never seen before (recorded in a :class:`~mcpauth.dpop.ReplayCache`) and,
when nonces are on, a nonce this server issued. A bound token presented as ``Bearer`` is
refused (§7.2); so is an unbound token presented as ``DPoP``; with ``required=True`` every
token must be bound. The URL the proof must name is this resource's origin (the URL clients
were told, so a proxy in front changes nothing, and a client's forwarding headers are never
believed) and the request's path as the client sent it (``raw_path``, with the ``root_path``
the server adds; the decoded ``path`` when the server gives no raw path that agrees with it).
When nonces are on, a response to an accepted DPoP request carries the current nonce, so
clients move to the next one without a refusal in between.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import unquote

from mcpauth import dpop
from mcpauth.caching import wall_clock
from mcpauth.dpop import DPoPNonces, MemoryReplayCache, ReplayCache, ReplayCacheFull
from mcpauth.errors import InvalidDPoPProof, InvalidToken, TemporarilyUnavailable, UseDPoPNonce
from mcpauth.middleware._asgi import Scope
from mcpauth.uris import origin

_origin = functools.lru_cache(maxsize=16)(origin)  # of the resource: one or a few per process

__all__ = ["DPoP"]


class ProofRefused(InvalidDPoPProof):
    """A proof a resource server refuses: 401 with a ``DPoP`` challenge (RFC 9449 §7.1)."""

    status_code: ClassVar[int] = 401


class NonceNeeded(UseDPoPNonce):
    """A resource server's nonce is missing or old: 401, ``DPoP-Nonce`` (RFC 9449 §9)."""

    status_code: ClassVar[int] = 401


class SchemeRefused(InvalidToken):
    """The token came with the wrong scheme for it; answered with a ``DPoP`` challenge."""


@dataclass
class DPoP:
    """How the middleware treats DPoP.

    ``required``: every token must be DPoP-bound (Bearer is refused with a DPoP challenge).
    ``nonce_key``: when given (16 bytes or more, the same on every replica), proofs must carry
    a nonce this server issued; nonces need no storage. ``replay``: where each proof's single
    use is recorded; by default a bounded record in this process (share one between replicas
    to refuse a replay at another: the middleware's ``shared_state=`` puts it in Redis).
    ``algorithms``: what proofs may be signed with. ``clock``: the seconds since the epoch that
    proofs and nonces are judged at (injectable for tests).
    """

    required: bool = False
    nonce_key: bytes | None = None
    replay: ReplayCache = field(default_factory=MemoryReplayCache)
    algorithms: Sequence[str] = dpop.ALGORITHMS
    clock: Callable[[], float] = field(default=wall_clock, repr=False)
    _nonces: DPoPNonces | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self._nonces = DPoPNonces(self.nonce_key) if self.nonce_key is not None else None
        if not isinstance(self.replay, ReplayCache):
            raise TypeError("replay must have an async first_use(key, expires_at) method")

    def challenge_params(self) -> list[tuple[str, str]]:
        return [("algs", " ".join(self.algorithms))]

    @property
    def uses_nonces(self) -> bool:
        return self._nonces is not None

    def nonce_header(self, now: float | None = None) -> dict[str, str]:
        """``DPoP-Nonce`` with the current nonce when nonces are on."""
        if self._nonces is None:
            return {}
        return {"DPoP-Nonce": self._nonces.current(self.clock() if now is None else now)}

    def binding(self, scheme: str, claims: Mapping[str, Any]) -> str | None:
        """The key thumbprint a proof must be of when a token with ``claims`` comes with
        ``scheme`` (its ``cnf.jkt``: the DPoP scheme), or ``None`` when the token may be used
        without one (Bearer).

        Raises:
            SchemeRefused: a bound token as Bearer, an unbound one as DPoP, or Bearer when
                DPoP is required (401 with a DPoP challenge).
            InvalidToken: ``cnf.jkt`` is not a string.
        """
        cnf = claims.get("cnf")
        bound = cnf.get("jkt") if isinstance(cnf, dict) else None
        if bound is not None and not isinstance(bound, str):
            raise InvalidToken("The token's cnf.jkt is not a thumbprint")
        if scheme == "bearer":
            if bound is not None:
                raise SchemeRefused("This token is DPoP-bound: send it with the DPoP scheme")
            if self.required:
                raise SchemeRefused("This resource accepts DPoP-bound tokens only")
            return None
        if bound is None:
            raise SchemeRefused("This token is not DPoP-bound: send it with the Bearer scheme")
        return bound

    async def check_proof(
        self, scope: Scope, token: str, bound: str, resource: str, *, proofs: Sequence[bytes]
    ) -> None:
        """Refuse the request unless ``proofs`` (its ``DPoP`` header values) are one proof of
        the key ``bound`` for this very request to ``resource`` with ``token``, used once.

        Raises:
            ProofRefused: no proof or a proof that fails a check (401, invalid_dpop_proof).
            NonceNeeded: a nonce is required and missing or old (401, use_dpop_nonce).
            TemporarilyUnavailable: the replay record is full, or a shared one cannot answer
                (503 with ``Retry-After``: a proof never passes unrecorded).
        """
        values = [v.decode("latin-1") for v in proofs]
        if not values:
            raise ProofRefused("A DPoP proof is required with the DPoP scheme")
        url = _origin(resource) + request_path(scope)
        now = self.clock()
        try:
            proof = dpop.check_proof(
                values,
                method=str(scope.get("method", "GET")),
                url=url,
                now=now,
                algorithms=self.algorithms,
                access_token=token,
                jkt=bound,
            )
        except InvalidDPoPProof as exc:
            raise ProofRefused(exc.description) from exc
        if self._nonces is not None and not self._nonces.accepts(proof.nonce, now):
            raise NonceNeeded(
                "This resource requires a DPoP nonce: use the one in the DPoP-Nonce header",
                headers=self.nonce_header(now),
            )
        try:
            fresh = await self.replay.first_use(proof.replay_key, proof.expires_at)
        except ReplayCacheFull as exc:
            raise TemporarilyUnavailable(
                "Too many requests to check; try again shortly", headers={"Retry-After": "5"}
            ) from exc
        if not fresh:
            raise ProofRefused("The DPoP proof was used before: make a new one per request")


def request_path(scope: Scope) -> str:
    """The request's path as the client sent it: ``raw_path`` (without a query, which some
    servers leave in it) when its decoded form is the ``path`` the server reports, else ``path``
    (a server that gives no raw path, or one without the ``root_path`` it adds to ``path``)."""
    path = str(scope.get("path") or "/")
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        sent = raw.split(b"?", 1)[0].decode("latin-1")
        if sent and unquote(sent) == path:
            return sent
    return path
