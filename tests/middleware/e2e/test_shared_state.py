"""Replicas of one resource sharing state through a real Redis (docs/security.md T30): two
``mcpauth proxy`` processes given the same ``--shared-state`` act as one. A DPoP proof
accepted by one is refused by the other (and by itself) with the single-process error; a rate
limit counts the requests of both together; nothing in Redis holds a token, a proof or a
subject in the clear. Redis stopped: a DPoP request and a counted request get 503 with
``Retry-After``, never 200, while a Bearer request that needs nothing from Redis still
passes. A Redis that accepts and never answers is bounded by the timeout."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from mcpauth import jwt
from mcpauth.dpop import make_proof
from tests.proxy.test_stdio_limits import INITIALIZE
from tests.proxy.test_stdio_limits import MCP_HEADERS as ACCEPT
from tests.redis_server import RedisServer, SilentListener, start_redis

from .conftest import Process, Spawner
from .test_sdk_end_to_end import mint

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

RATE_LIMIT = 5
# Where a test is not about the timeout, one that a loaded machine cannot reach by accident
GENEROUS = "2"
REPLAYED = {
    "error": "invalid_dpop_proof",
    "error_description": "The DPoP proof was used before: make a new one per request",
}


@dataclass
class Replicas:
    """An authorization server, an MCP upstream and two proxy replicas of one resource on one
    Redis; the client knows the resource by the first replica's URL."""

    key: jwt.PrivateKey
    issuer: str
    upstream: str
    resource: str
    first: str
    second: str
    redis: RedisServer


def start_proxy(spawn: Callable[..., Process], resource: str, *options: str) -> Process:
    return spawn("--resource", resource, *options, module="mcpauth.proxy.cli", path="/mcp")


@pytest.fixture(scope="module")
def replicas(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    key = jwt.generate_private_key("ES256")
    key_file = tmp_path_factory.mktemp("shared-state") / "key.pem"
    key_file.write_bytes(jwt.private_key_to_pem(key))
    spawn = Spawner()
    try:
        issuer = spawn("as", "--issuer", "{url}", "--key-file", str(key_file)).url
        upstream = spawn("mcp", "--unprotected", path="/mcp").url
        options = [
            "--authorization-server", issuer, "--scope", "mcp:basic", "--upstream", upstream,
            "--shared-state", redis_server.url, "--rate-limit", str(RATE_LIMIT),
            "--shared-state-timeout", GENEROUS,
        ]  # fmt: skip
        first = start_proxy(spawn, "{url}/mcp", *options)
        second = start_proxy(spawn, first.url, *options)
        yield Replicas(key, issuer, upstream, first.url, first.url, second.url, redis_server)
    finally:
        spawn.close()


def dpop_key() -> tuple[ec.EllipticCurvePrivateKey, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, jwt.thumbprint(jwt.public_jwk(key.public_key(), kid="", alg="ES256"))


def dpop_headers(token: str, key: ec.EllipticCurvePrivateKey, resource: str) -> dict[str, str]:
    proof = make_proof(key, alg="ES256", method="POST", url=resource, access_token=token)
    return {**ACCEPT, "Authorization": f"DPoP {token}", "DPoP": proof}


def bearer(token: str) -> dict[str, str]:
    return {**ACCEPT, "Authorization": f"Bearer {token}"}


async def initialize(http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> Any:
    return await http.post(url, json=INITIALIZE, headers=headers)


async def test_a_dpop_proof_accepted_by_one_replica_is_refused_by_both(
    replicas: Replicas,
) -> None:
    key, jkt = dpop_key()
    token = mint(replicas.key, replicas.issuer, replicas.resource, sub="dpop", cnf={"jkt": jkt})
    once = dpop_headers(token, key, replicas.resource)
    async with httpx2.AsyncClient(timeout=30) as http:
        accepted = await initialize(http, replicas.first, once)
        at_the_other = await initialize(http, replicas.second, once)
        at_the_same = await initialize(http, replicas.first, once)
        fresh = await initialize(http, replicas.second, dpop_headers(token, key, replicas.resource))
    assert accepted.status_code == 200, accepted.text
    for replayed in (at_the_other, at_the_same):
        assert replayed.status_code == 401
        assert replayed.json() == REPLAYED  # what one process says of a proof it saw
        assert 'DPoP error="invalid_dpop_proof"' in replayed.headers["www-authenticate"]
    assert fresh.status_code == 200, fresh.text


async def test_a_rate_limit_counts_the_requests_of_both_replicas_together(
    replicas: Replicas,
) -> None:
    token = mint(replicas.key, replicas.issuer, replicas.resource, sub="counted")
    other = mint(replicas.key, replicas.issuer, replicas.resource, sub="someone-else")
    urls = [replicas.first, replicas.second]
    async with httpx2.AsyncClient(timeout=30) as http:
        within = [await initialize(http, urls[i % 2], bearer(token)) for i in range(RATE_LIMIT)]
        over = [await initialize(http, url, bearer(token)) for url in urls]
        someone_else = await initialize(http, replicas.second, bearer(other))
    assert [r.status_code for r in within] == [200] * RATE_LIMIT
    for refused in over:
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        body = refused.json()
        assert body["jsonrpc"] == "2.0"
        assert body["id"] is None
        assert body["error"]["code"] == -32000
        assert "Too many requests" in body["error"]["message"]
    assert someone_else.status_code == 200  # each caller has its own count


async def test_no_token_proof_or_subject_is_kept_in_redis(replicas: Replicas) -> None:
    key, jkt = dpop_key()
    bound = mint(
        replicas.key, replicas.issuer, replicas.resource, sub="secret-sub", cnf={"jkt": jkt}
    )
    plain = mint(replicas.key, replicas.issuer, replicas.resource, sub="secret-sub")
    proof_headers = dpop_headers(bound, key, replicas.resource)
    async with httpx2.AsyncClient(timeout=30) as http:
        assert (await initialize(http, replicas.first, proof_headers)).status_code == 200
        assert (await initialize(http, replicas.second, bearer(plain))).status_code == 200
    secrets_sent = [bound, plain, proof_headers["DPoP"], "secret-sub", jkt]
    secrets_sent += [part for token in (bound, plain) for part in token.split(".")]
    with replicas.redis.client() as client:
        keys = [bytes(k) for k in client.keys("*")]
        values = [bytes(client.get(k) or b"") for k in keys]
    kinds = {k.decode().split(":")[2] for k in keys}
    assert {"dpop", "rate"} <= kinds  # the flow did store something
    assert all(k.decode().startswith("mcpauth:") for k in keys)
    for stored in keys + values:
        for secret in secrets_sent:
            assert secret.encode() not in stored


async def test_with_redis_stopped_what_needs_it_gets_503_never_200(
    spawn: Callable[..., Process], replicas: Replicas
) -> None:
    redis = start_redis()
    try:
        shared = [
            "--authorization-server", replicas.issuer, "--upstream", replicas.upstream,
            "--shared-state", redis.url, "--shared-state-timeout", GENEROUS,
        ]  # fmt: skip
        plain = start_proxy(spawn, "{url}/mcp", *shared)
        counted = start_proxy(spawn, "{url}/mcp", *shared, "--rate-limit", "100")
        key, jkt = dpop_key()
        bound = mint(replicas.key, replicas.issuer, plain.url, cnf={"jkt": jkt})
        async with httpx2.AsyncClient(timeout=30) as http:
            up = await initialize(http, plain.url, dpop_headers(bound, key, plain.url))
            assert up.status_code == 200, up.text
            redis.stop()
            down = await initialize(http, plain.url, dpop_headers(bound, key, plain.url))
            unbound = mint(replicas.key, replicas.issuer, plain.url)
            needs_nothing = await initialize(http, plain.url, bearer(unbound))
            token = mint(replicas.key, replicas.issuer, counted.url)
            uncounted = await initialize(http, counted.url, bearer(token))
    finally:
        redis.stop()
    assert down.status_code == 503
    assert down.headers["Retry-After"] == "1"
    assert down.json()["error"] == "temporarily_unavailable"
    assert "redis" not in down.text.lower()  # nothing internal named
    assert needs_nothing.status_code == 200  # a JWT verdict and no rate limit: no Redis call
    assert uncounted.status_code == 503
    assert uncounted.headers["Retry-After"] == "1"
    assert uncounted.json()["error"]["code"] == -32000


async def test_a_redis_that_never_answers_is_bounded_by_the_timeout(
    spawn: Callable[..., Process], replicas: Replicas, silent_redis: SilentListener
) -> None:
    timeout = 0.3
    proxy = start_proxy(
        spawn, "{url}/mcp", "--authorization-server", replicas.issuer,
        "--upstream", replicas.upstream,
        "--shared-state", silent_redis.url,
        "--shared-state-timeout", str(timeout),
    )  # fmt: skip
    key, jkt = dpop_key()
    bound = mint(replicas.key, replicas.issuer, proxy.url, cnf={"jkt": jkt})
    async with httpx2.AsyncClient(timeout=30) as http:
        # a first request that needs no Redis: the proxy is up and has the issuer's keys
        warm = await initialize(
            http, proxy.url, bearer(mint(replicas.key, replicas.issuer, proxy.url))
        )
        assert warm.status_code == 200, warm.text
        started = time.monotonic()
        hung = await initialize(http, proxy.url, dpop_headers(bound, key, proxy.url))
        elapsed = time.monotonic() - started
    assert hung.status_code == 503
    assert hung.headers["Retry-After"] == "1"
    assert silent_redis.accepted  # the proxy did reach it, and waited
    # the timeout, plus a request's own time on a loaded machine; never Redis's whims
    assert timeout <= elapsed < timeout + 2.5, elapsed
