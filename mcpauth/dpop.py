"""DPoP proofs (RFC 9449), made and checked the same way by all three parts: the client makes
them, the authorization server checks them at the token endpoint, the middleware at the
protected resource. Also what both servers need around the check: stateless nonces
(:class:`DPoPNonces`) and a bounded single-use record of proofs (:class:`MemoryReplayCache`).

:func:`check_proof` is the whole of RFC 9449 §4.3 except the single use of ``jti``, which needs
storage shared by the caller's replicas: it returns ``replay_key`` for that. Each failure raises
:class:`~mcpauth.errors.InvalidDPoPProof` (or :class:`~mcpauth.errors.UseDPoPNonce`) with a
description that names the rule, never the key or the proof.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import heapq
import hmac
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

import jwt as pyjwt
import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa, utils

from mcpauth import jwt
from mcpauth.errors import InvalidDPoPProof, UseDPoPNonce
from mcpauth.oauth import same_secret

__all__ = [
    "ALGORITHMS",
    "DPoPNonces",
    "DPoPProof",
    "MemoryReplayCache",
    "ReplayCache",
    "ReplayCacheFull",
    "access_token_hash",
    "check_proof",
    "make_proof",
]

PROOF_TYPE = "dpop+jwt"
# What the server accepts and advertises (dpop_signing_alg_values_supported): asymmetric only.
ALGORITHMS = ("ES256", "EdDSA", "RS256", "PS256")
MAX_PROOF_LENGTH = 8192  # a proof with an RSA-4096 key is about 1.5 KiB
MAX_AGE = 300  # seconds a proof is accepted after its iat
CLOCK_SKEW = 30  # seconds a proof's iat may lie in the future
# the in-memory replay record's bound: MAX_AGE + CLOCK_SKEW seconds of 1,200 proofs a second
DEFAULT_REPLAY_ENTRIES = 400_000
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HEX = frozenset("0123456789abcdefABCDEF")
_BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_BASE64URL_BYTES = _BASE64URL.encode("ascii")
# The last character of a canonical segment leaves its unused bits at zero (RFC 4648 §3.5):
# 4 of them after 2 characters of a group, 2 after 3.
_CANONICAL_LAST = {
    2: frozenset(c for i, c in enumerate(_BASE64URL) if i % 16 == 0),
    3: frozenset(c for i, c in enumerate(_BASE64URL) if i % 4 == 0),
}
_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
# ES256 (RFC 7518 §3.4): ECDSA on P-256 over the SHA-256 of the signing input
_ES256_PREHASHED = ec.ECDSA(utils.Prehashed(hashes.SHA256()))
# A client signs all its proofs with one key, so the same header comes with each of them:
# the checked key of a header is kept (bounded; what fails a check is never kept).
_HEADER_CACHE_SIZE = 256
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


@dataclass(frozen=True)
class DPoPProof:
    """A proof that passed every check: the thumbprint of its key (what ``cnf.jkt`` binds a
    token to), its ``jti`` and ``iat``, and the key ``replay_key`` under which its single use
    is recorded until ``iat + MAX_AGE``."""

    jkt: str
    jti: str
    iat: int
    replay_key: str
    nonce: str | None = None  # the proof's nonce claim, for a server that checks its own

    @property
    def expires_at(self) -> int:
        return self.iat + MAX_AGE + CLOCK_SKEW


def _b64url_sha256(value: str) -> str:
    digest = hashlib.sha256(value.encode("ascii")).digest()
    # 32 bytes: 43 characters and one "=" of padding
    return binascii.b2a_base64(digest, newline=False)[:43].translate(_TO_URLSAFE).decode("ascii")


def access_token_hash(access_token: str) -> str:
    """``ath``: base64url of the SHA-256 of the access token (RFC 9449 §4.2)."""
    return _b64url_sha256(access_token)


def _normal_path(path: str) -> str:
    """Percent-encoding normalised (RFC 3986 §6.2.2): unreserved characters decoded, other
    escapes in upper case; an empty path is ``/``."""
    out: list[str] = []
    i = 0
    while i < len(path):
        escape = path[i + 1 : i + 3]
        if path[i] == "%" and len(escape) == 2 and all(c in _HEX for c in escape):
            char = unquote("%" + escape)
            out.append(char if len(char) == 1 and char in _UNRESERVED else "%" + escape.upper())
            i += 3
        else:
            out.append(path[i])
            i += 1
    return "".join(out) or "/"


def normal_htu(url: str) -> str:
    """The form in which ``htu`` and the request URI are compared (RFC 9449 §4.3 step 9): no
    query or fragment; scheme and host in lower case; the scheme's default port dropped;
    percent-encoding normalised.

    Raises:
        ValueError: not an absolute http(s) URL.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError("not an absolute http(s) URL")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    return f"{scheme}://{netloc}{_normal_path(parts.path)}"


Verify = Callable[[bytes, bytes], bool]  # (signing input, signature) -> whether it verifies


def _es256(key: ec.EllipticCurvePublicKey) -> Verify:
    """The ES256 check of PyJWT's algorithm (RFC 7518 §3.4: ``R || S``, 32 bytes each, of an
    ECDSA P-256 signature over the SHA-256 of the signing input), with the digest made by
    hashlib and no Python between it and OpenSSL: a few microseconds less on every request."""

    def verify(signing_input: bytes, signature: bytes) -> bool:
        if len(signature) != 64:
            return False
        r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        digest = hashlib.sha256(signing_input).digest()
        try:
            key.verify(utils.encode_dss_signature(r, s), digest, _ES256_PREHASHED)
        except InvalidSignature:
            return False
        return True

    return verify


def _verifier(key: pyjwt.PyJWK) -> Verify:
    """How a proof signed with ``key`` (of its ``alg``) is verified."""
    public = key.key
    if (
        key.algorithm_name == "ES256"
        and isinstance(public, ec.EllipticCurvePublicKey)
        and isinstance(public.curve, ec.SECP256R1)
    ):
        return _es256(public)
    algorithm = key.Algorithm
    return lambda signing_input, signature: bool(algorithm.verify(signing_input, public, signature))


def _public_key(header: Mapping[str, Any], alg: str) -> tuple[Verify, str]:
    jwk = header.get("jwk")
    if not isinstance(jwk, dict):
        raise InvalidDPoPProof("The DPoP proof's header must carry its public key as jwk")
    if _PRIVATE_MEMBERS & jwk.keys():
        raise InvalidDPoPProof("The DPoP proof's jwk must hold a public key only")
    try:
        if jwt.algorithm_for_jwk({**jwk, "alg": alg}) != alg:
            raise ValueError("the key does not admit this alg")
        key = pyjwt.PyJWK(dict(jwk), algorithm=alg)
        thumbprint = jwt.thumbprint(jwk)
    except (ValueError, KeyError, TypeError, pyjwt.PyJWTError) as exc:
        raise InvalidDPoPProof("The DPoP proof's jwk is not a usable key for its alg") from exc
    if isinstance(key.key, rsa.RSAPublicKey) and not 2048 <= key.key.key_size <= 4096:
        raise InvalidDPoPProof("The DPoP proof's RSA key must be 2048 to 4096 bits")
    return _verifier(key), thumbprint


def _segment(value: str) -> bytes:
    """One base64url segment of a compact JWS, decoded strictly (RFC 7515 §2): the URL-safe
    alphabet, no padding, and the canonical encoding of what it decodes to.

    Raises:
        ValueError: anything else.
    """
    tail = len(value) % 4
    # what is left once every character of the alphabet is deleted (a C loop) is nothing
    if tail == 1 or not value or not value.isascii():
        raise ValueError("not a base64url segment")
    data = value.encode("ascii")
    if data.translate(None, _BASE64URL_BYTES):
        raise ValueError("not a base64url segment")
    if tail and value[-1] not in _CANONICAL_LAST[tail]:
        raise ValueError("not the canonical encoding")
    return binascii.a2b_base64(data.translate(_TO_STANDARD) + b"=" * (-tail % 4), strict_mode=True)


def _json_object(segment: bytes) -> dict[str, Any]:
    """A JSON object in UTF-8 (RFC 7519 §7.2: the header and the claims are UTF-8 JSON).

    Raises:
        ValueError: anything else.
    """
    value = orjson.loads(segment)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


@functools.lru_cache(maxsize=_HEADER_CACHE_SIZE)
def _header_key(segment: str, algorithms: tuple[str, ...]) -> tuple[Verify, str]:
    """The signature check with the public key of a proof's header segment, checked (``typ``,
    an allowed ``alg``, no extensions, a public ``jwk`` of that algorithm), and its thumbprint.

    Raises:
        InvalidDPoPProof: a check failed (nothing is cached then).
    """
    try:
        header = _json_object(_segment(segment))
    except ValueError as exc:
        raise InvalidDPoPProof("The DPoP proof is not a JWT") from exc
    if header.get("typ") != PROOF_TYPE:
        raise InvalidDPoPProof(f"The DPoP proof's typ must be {PROOF_TYPE}")
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in algorithms:
        raise InvalidDPoPProof(f"The DPoP proof's alg must be one of {', '.join(algorithms)}")
    if "crit" in header or "b64" in header:
        raise InvalidDPoPProof("The DPoP proof's header asks for extensions this server lacks")
    return _public_key(header, alg)


def _verified_claims(
    values: Sequence[str], algorithms: Sequence[str]
) -> tuple[dict[str, Any], str]:
    """The claims of the one proof in ``values``, its signature verified with its own public
    key of an allowed algorithm, and that key's thumbprint. The compact JWS is read once, here
    (PyJWT's decoder would read it twice and its header again); the signature is checked by
    PyJWT's algorithm for ``alg`` (ES256: the same check, made directly, :func:`_es256`)."""
    if len(values) != 1:
        raise InvalidDPoPProof(
            "Exactly one DPoP header is required" if values else "A DPoP proof is required"
        )
    proof = values[0].strip()
    if not proof or len(proof) > MAX_PROOF_LENGTH:
        raise InvalidDPoPProof("The DPoP proof is empty or too long")
    parts = proof.split(".")
    if len(parts) != 3:
        raise InvalidDPoPProof("The DPoP proof is not a JWT")
    verify, thumbprint = _header_key(parts[0], tuple(algorithms))
    try:
        payload, signature = _segment(parts[1]), _segment(parts[2])
    except ValueError as exc:
        raise InvalidDPoPProof("The DPoP proof cannot be read") from exc
    signing_input = f"{parts[0]}.{parts[1]}".encode("ascii")  # both segments are base64url
    if not verify(signing_input, signature):
        raise InvalidDPoPProof("The DPoP proof's signature does not verify")
    try:
        claims = _json_object(payload)
    except ValueError as exc:
        raise InvalidDPoPProof("The DPoP proof cannot be read") from exc
    return claims, thumbprint


@functools.lru_cache(maxsize=_HEADER_CACHE_SIZE)
def _normal_request_uri(url: str) -> str | None:
    """``normal_htu(url)`` of the request (``None`` if it is not an absolute http(s) URL), kept:
    a server sees the same few URIs again and again."""
    try:
        return normal_htu(url)
    except ValueError:
        return None


def _same_uri(htu: object, url: str) -> bool:
    """Whether ``htu`` names the request URI ``url`` (RFC 9449 §4.3 step 9). An ``htu`` already
    in normal form, as clients make it, is compared as it is (``normal_htu`` leaves a normal
    form unchanged)."""
    expected = _normal_request_uri(url)
    if not isinstance(htu, str) or expected is None:
        return False
    if htu == expected:
        return True
    try:
        return normal_htu(htu) == expected
    except ValueError:
        return False


def _check_request(claims: Mapping[str, Any], method: str, url: str, now: float) -> None:
    """``jti``, ``htm``, ``htu`` and ``iat`` against the request and the clock."""
    jti, htm, htu, iat = claims.get("jti"), claims.get("htm"), claims.get("htu"), claims.get("iat")
    if not isinstance(jti, str) or not 8 <= len(jti) <= 256:
        raise InvalidDPoPProof("The DPoP proof needs a jti of 8 to 256 characters")
    if htm != method.upper():
        raise InvalidDPoPProof("The DPoP proof's htm is not this request's method")
    if not _same_uri(htu, url):
        raise InvalidDPoPProof("The DPoP proof's htu is not this request's URI")
    if not isinstance(iat, int) or isinstance(iat, bool):
        raise InvalidDPoPProof("The DPoP proof needs a numeric iat")
    if iat > now + CLOCK_SKEW or iat < now - MAX_AGE:
        raise InvalidDPoPProof("The DPoP proof's iat is outside the accepted window")


def check_proof(
    values: Sequence[str],
    *,
    method: str,
    url: str,
    now: float | None = None,
    algorithms: Sequence[str] = ALGORITHMS,
    access_token: str | None = None,
    nonce: str | None = None,
    jkt: str | None = None,
) -> DPoPProof:
    """Check the ``DPoP`` header field(s) of a request to ``method`` ``url``.

    ``access_token``: the token the request presents (a resource server): ``ath`` must be its
    hash. ``nonce``: the nonce the server currently expects (a missing or other one raises
    :class:`UseDPoPNonce`, whose caller sends a fresh one). ``jkt``: the thumbprint the
    presented token is bound to (``cnf.jkt``).

    Raises:
        InvalidDPoPProof: no, several or a malformed proof; any RFC 9449 §4.3 check failed.
        UseDPoPNonce: the server requires a nonce and the proof has none or an old one.
    """
    claims, thumbprint = _verified_claims(values, algorithms)
    _check_request(claims, method, url, time.time() if now is None else now)
    if nonce is not None and claims.get("nonce") != nonce:
        raise UseDPoPNonce("Use the nonce the server sent in DPoP-Nonce")
    if access_token is not None:
        ath = claims.get("ath")
        if not isinstance(ath, str) or not same_secret(ath, access_token_hash(access_token)):
            raise InvalidDPoPProof("The DPoP proof's ath does not match the access token")
    if jkt is not None and not same_secret(thumbprint, jkt):
        raise InvalidDPoPProof("The DPoP proof's key is not the key the token is bound to")
    jti = str(claims["jti"])
    nonce_claim = claims.get("nonce")
    return DPoPProof(
        jkt=thumbprint,
        jti=jti,
        iat=int(claims["iat"]),
        replay_key=_b64url_sha256(f"{thumbprint}:{jti}"),
        nonce=nonce_claim if isinstance(nonce_claim, str) else None,
    )


def make_proof(
    key: jwt.PrivateKey,
    *,
    alg: str,
    method: str,
    url: str,
    access_token: str | None = None,
    nonce: str | None = None,
    now: float | None = None,
) -> str:
    """A DPoP proof for one request, signed with ``key`` (the client side)."""
    public = jwt.public_jwk(key.public_key(), kid="", alg=alg)
    public = {k: v for k, v in public.items() if k not in ("kid", "alg", "use")}
    claims: dict[str, Any] = {
        "jti": secrets.token_urlsafe(16),
        "htm": method.upper(),
        "htu": normal_htu(url),
        "iat": int(time.time() if now is None else now),
    }
    if access_token is not None:
        claims["ath"] = access_token_hash(access_token)
    if nonce is not None:
        claims["nonce"] = nonce
    return pyjwt.encode(claims, key, algorithm=alg, headers={"typ": PROOF_TYPE, "jwk": public})


NONCE_WINDOW_SECONDS = 120


class DPoPNonces:
    """Server-issued nonces (RFC 9449 §8, §9) that every replica accepts without shared state:
    a nonce is an HMAC of its time window under ``key``, so any replica with the same key makes
    and checks the same values and nothing is stored; a nonce of the current or the previous
    window is accepted, so each lives between one and two windows."""

    def __init__(self, key: bytes, window: int = NONCE_WINDOW_SECONDS) -> None:
        if len(key) < 16:
            raise ValueError("a DPoP nonce key needs at least 16 bytes")
        self._key = key
        self._window = window

    def _for(self, index: int) -> str:
        mac = hmac.new(self._key, f"dpop-nonce:{index}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac[:18]).decode("ascii")

    def current(self, now: float) -> str:
        """The nonce to hand out at ``now``."""
        return self._for(int(now) // self._window)

    def accepts(self, nonce: str | None, now: float) -> bool:
        """Whether ``nonce`` was made in this window or the previous one."""
        if not nonce:
            return False
        index = int(now) // self._window
        valid = (self._for(index), self._for(index - 1))
        return any(same_secret(nonce, v) for v in valid)


@runtime_checkable
class ReplayCache(Protocol):
    """Where a resource server records each proof's single use (``DPoPProof.replay_key``);
    share one between replicas (a database, Redis) to refuse a replay at any of them."""

    async def first_use(self, key: str, expires_at: float) -> bool:
        """Record ``key`` until ``expires_at``; False if it is already recorded (a replay)."""
        ...


class ReplayCacheFull(Exception):
    """The in-memory record holds as many unexpired proofs as it may."""


class MemoryReplayCache:
    """The single-use record of one process, bounded: expired entries are dropped as new ones
    come, a second's worth at a time (each entry is filed under the second it expires in, so no
    request pays for a sweep of the whole record, nor for keeping it in expiry order); when
    ``max_entries`` unexpired proofs are recorded a new proof is refused
    (:class:`ReplayCacheFull`) rather than an unexpired record evicted, which would let that
    proof be replayed. A proof is accepted for at most ``MAX_AGE + CLOCK_SKEW`` seconds, so the
    record needs about that many seconds of proofs: the default bound holds a full window at
    1,200 proofs a second, more than one process checks behind an MCP SDK app (about 1,100 in
    ``bench/dpop``), in about 40 MiB when full.

    Every entry lives in dictionaries of strings and numbers only, which the cyclic garbage
    collector does not track: however many proofs are recorded, a full collection walks a
    few hundred objects of the record, not one or more per proof.
    """

    def __init__(self, max_entries: int = DEFAULT_REPLAY_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max = max_entries
        self._entries: dict[str, float] = {}  # key -> expires_at
        self._seconds: dict[int, dict[str, float]] = {}  # floor(expires_at) -> its entries
        self._heap: list[int] = []  # the keys of _seconds, soonest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def _forget(self, second: int, now: float) -> None:
        """Drop the entries filed under ``second`` that have expired at ``now`` (the current
        second: some of its entries may have), as :meth:`_drop_expired` does."""
        filed = self._seconds[second]
        entries = self._entries
        for key, expires_at in [item for item in filed.items() if item[1] <= now]:
            del filed[key]
            if entries.get(key) == expires_at:
                del entries[key]

    def _drop_expired(self, now: float) -> None:
        """Drop every second whose entries have all expired (``expires_at <= now``), unless
        their key was recorded again since (under another expiry)."""
        heap, entries = self._heap, self._entries
        while heap and heap[0] + 1 <= now:
            for key, expires_at in self._seconds.pop(heapq.heappop(heap)).items():
                if entries.get(key) == expires_at:
                    del entries[key]

    async def first_use(self, key: str, expires_at: float) -> bool:
        """Record ``key`` until ``expires_at``; False if it is already recorded (a replay).

        Raises:
            ReplayCacheFull: ``max_entries`` unexpired proofs are recorded.
            ValueError: ``expires_at`` is not a finite number.
        """
        if not math.isfinite(expires_at):
            raise ValueError("expires_at must be a finite number")
        second = math.floor(expires_at)
        now = time.time()
        with self._lock:
            self._drop_expired(now)
            entries = self._entries
            recorded = entries.get(key)
            if recorded is not None:
                if recorded > now:
                    return False
                del entries[key]  # expired this very second: the key is free again
            if len(entries) >= self._max:
                current = math.floor(now)  # the one second that may hold expired entries
                if current in self._seconds:
                    self._forget(current, now)
                if len(entries) >= self._max:
                    raise ReplayCacheFull("too many DPoP proofs in the replay window")
            entries[key] = expires_at
            filed = self._seconds.get(second)
            if filed is None:
                filed = self._seconds[second] = {}
                heapq.heappush(self._heap, second)
            filed[key] = expires_at
            return True
