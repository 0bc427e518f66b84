"""The client helper's DPoP flow (RFC 9449, docs/security.md T30) against the fake servers,
which check every proof with ``mcpauth.dpop.check_proof``: when tokens are bound (the
authorization server's metadata or the resource's challenge offers DPoP) and when they are not
(nothing offered, ``Policy(dpop="off")``), proofs at the token endpoint and at the resource, the
nonce retries at each (once), the same key for refreshes and for the next process, and what
``"required"`` refuses."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.responses import JSONResponse, Response

from mcpauth.client import (
    ClientCredentials,
    ClientCredentialsGrant,
    FileStorage,
    MemoryStorage,
    OAuth,
    Policy,
    TokenRequestFailed,
    TokenStorage,
)
from tests.client.conftest import _SyncASGI
from tests.client.fakes import FakeServers

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


class Client:
    """``OAuth`` for the fake's resource (client_credentials) in an ``httpx2.Client`` that
    records the DPoP header of every request it sends."""

    def __init__(self, fake: FakeServers, storage: TokenStorage | None = None, **policy: Any):
        self.fake = fake
        self.auth = OAuth(
            fake.resource,
            credentials=ClientCredentials("svc", "s3cret"),
            grant=ClientCredentialsGrant(),
            storage=storage if storage is not None else MemoryStorage(),
            policy=Policy(clock=fake.clock, **policy),
        )
        self.sent: list[tuple[str, str | None]] = []  # (path, DPoP header)
        self.http = httpx2.Client(
            transport=_SyncASGI(fake),
            base_url=fake.base,
            auth=self.auth,
            event_hooks={"request": [self._record]},
        )

    def _record(self, request: httpx2.Request) -> None:
        self.sent.append((request.url.path, request.headers.get("dpop")))

    def call(self) -> httpx2.Response:
        return self.http.post(self.fake.resource, json=PING)

    def proofs_to(self, path: str) -> list[str | None]:
        return [proof for sent, proof in self.sent if sent == path]

    @property
    def jkt(self) -> str:
        key = self.auth.flow.dpop_key
        assert key is not None
        return key.thumbprint


@pytest.fixture
def offering(fake: FakeServers) -> FakeServers:
    fake.dpop_algs = ["ES256", "EdDSA"]
    return fake


@pytest.fixture
def client(offering: FakeServers) -> Iterator[Client]:
    made = Client(offering)
    yield made
    made.http.close()


def grants(fake: FakeServers) -> list[str]:
    return [request["grant_type"] for request in fake.token_requests]


def test_tokens_are_bound_when_the_server_offers_dpop_and_each_request_has_a_fresh_proof(
    offering: FakeServers, client: Client
) -> None:
    assert [client.call().status_code for _ in range(3)] == [200, 200, 200]
    tokens = client.auth.tokens
    assert tokens is not None
    assert tokens.bound
    assert tokens.token_type == "DPoP"
    (token_proof,) = offering.token_proofs
    assert token_proof is not None
    assert token_proof.jkt == client.jkt
    assert all(a is not None and a.startswith("DPoP ") for a in offering.resource_requests[1:])
    # the fake checked htm, htu, ath and the key of each; every jti is new
    assert len({p.jti for p in offering.resource_proofs}) == len(offering.resource_proofs) == 3
    assert {p.jkt for p in offering.resource_proofs} == {client.jkt}


def test_a_refresh_is_proved_with_the_same_key_and_gives_a_bound_token(
    offering: FakeServers, client: Client
) -> None:
    assert client.call().status_code == 200
    first = client.auth.tokens
    offering.now += 3600  # expired: the next request refreshes first
    assert client.call().status_code == 200
    assert grants(offering) == ["client_credentials", "refresh_token"]
    assert [p.jkt if p else None for p in offering.token_proofs] == [client.jkt, client.jkt]
    renewed = client.auth.tokens
    assert renewed is not None
    assert first is not None
    assert renewed.bound
    assert renewed.access_token != first.access_token


def test_the_token_endpoint_nonce_is_used_on_one_retry_and_then_from_the_start(
    offering: FakeServers, client: Client
) -> None:
    offering.as_nonce = "as-nonce-1"
    assert client.call().status_code == 200
    assert [p.nonce if p else None for p in offering.token_proofs] == [None, "as-nonce-1"]
    offering.now += 3600
    assert client.call().status_code == 200
    # the refresh carried the nonce the server sent before: no second use_dpop_nonce
    assert [p.nonce if p else None for p in offering.token_proofs][2:] == ["as-nonce-1"]
    assert grants(offering) == ["client_credentials"] * 2 + ["refresh_token"]


def test_the_token_endpoint_nonce_is_retried_only_once(
    offering: FakeServers, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def always_a_new_nonce(request: Any) -> Response:
        nonce = f"nonce-{len(offering.token_requests)}"
        headers = {"dpop-nonce": nonce}
        return JSONResponse({"error": "use_dpop_nonce"}, 400, headers=headers)

    monkeypatch.setattr(offering, "token_proof", always_a_new_nonce)
    with pytest.raises(TokenRequestFailed) as refused:
        client.call()
    assert refused.value.error == "use_dpop_nonce"
    assert len(offering.token_requests) == 2


def test_the_resource_nonce_is_used_on_one_retry_and_remembered(
    offering: FakeServers, client: Client
) -> None:
    offering.rs_nonce = "rs-nonce-1"
    assert client.call().status_code == 200
    # no token, the DPoP request without the nonce, its retry with it
    assert len(offering.resource_requests) == 3
    assert client.call().status_code == 200
    assert len(offering.resource_requests) == 4  # the nonce went along at once
    assert [p.nonce for p in offering.resource_proofs] == ["rs-nonce-1", "rs-nonce-1"]
    assert len(offering.token_requests) == 1


def test_the_resource_nonce_is_retried_only_once(
    offering: FakeServers, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.call().status_code == 200
    before = len(offering.resource_requests)

    def always_asks(authorization: str | None, dpop: list[str] | None = None) -> Response:
        offering.resource_requests.append(authorization)
        refusal = offering.challenge(401, "use_dpop_nonce", None, dpop=True)
        refusal.headers["dpop-nonce"] = f"nonce-{len(offering.resource_requests)}"
        return refusal

    monkeypatch.setattr(offering, "check_bearer", always_asks)
    assert client.call().status_code == 401
    assert len(offering.resource_requests) - before == 2
    assert len(offering.token_requests) == 1  # a nonce is not a reason to get new tokens


def test_bearer_when_nothing_offers_dpop(fake: FakeServers) -> None:
    client = Client(fake)
    assert client.call().status_code == 200
    tokens = client.auth.tokens
    assert tokens is not None
    assert not tokens.bound
    assert client.auth.flow.dpop_key is None
    assert [proof for _, proof in client.sent] == [None] * len(client.sent)
    assert fake.resource_requests[-1] == f"Bearer {tokens.access_token}"


def test_off_never_binds_even_when_offered(offering: FakeServers) -> None:
    client = Client(offering, dpop="off")
    assert client.call().status_code == 200
    assert client.auth.tokens is not None
    assert not client.auth.tokens.bound
    assert [proof for _, proof in client.sent] == [None] * len(client.sent)


def test_required_refuses_a_server_without_dpop_before_asking_for_a_token(
    fake: FakeServers,
) -> None:
    client = Client(fake, dpop="required")
    with pytest.raises(TokenRequestFailed, match="does not offer DPoP"):
        client.call()
    assert fake.token_requests == []


def test_a_bearer_answer_to_a_proof_is_used_as_bearer_unless_dpop_is_required(
    offering: FakeServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    issue = offering.issue
    monkeypatch.setattr(offering, "issue", lambda c, s, jkt=None: issue(c, s))  # never binds
    auto = Client(offering)
    assert auto.call().status_code == 200
    assert auto.proofs_to("/token") != [None]
    assert offering.resource_requests[-1] is not None
    assert offering.resource_requests[-1].startswith("Bearer ")
    with pytest.raises(TokenRequestFailed, match="not DPoP-bound"):
        Client(offering, dpop="required").call()


def test_a_dpop_challenge_from_the_resource_is_enough_to_bind(fake: FakeServers) -> None:
    fake.dpop_algs = ["EdDSA"]
    fake.dpop_in_metadata = False  # only the resource says so
    fake.rs_dpop_algs = "EdDSA"
    client = Client(fake)
    assert client.call().status_code == 200
    key = client.auth.flow.dpop_key
    assert key is not None
    assert key.alg == "EdDSA"
    assert fake.token_proofs[0] is not None
    assert fake.token_proofs[0].jkt == key.thumbprint
    assert client.auth.tokens is not None
    assert client.auth.tokens.bound


def test_the_key_and_the_bound_tokens_serve_the_next_process(
    offering: FakeServers, tmp_path: Path
) -> None:
    path = tmp_path / "client.json"
    first = Client(offering, FileStorage(path))
    assert first.call().status_code == 200
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert offering.token_proofs[0] is not None
    bound_to = offering.token_proofs[0].jkt
    assert "PRIVATE KEY" in path.read_text()  # the key is in the store, not in a new file
    second = Client(offering, FileStorage(path))
    assert second.call().status_code == 200
    assert len(offering.token_requests) == 1  # the stored bound token, proved with the stored key
    assert offering.resource_proofs[-1].jkt == bound_to


def test_memory_storage_keeps_the_key_for_other_clients_of_this_process(
    offering: FakeServers,
) -> None:
    storage = MemoryStorage()
    assert Client(offering, storage).call().status_code == 200
    key = storage.get_dpop_key(offering.base)
    assert key is not None
    assert Client(offering, storage).call().status_code == 200
    assert len(offering.token_requests) == 1
    assert offering.resource_proofs[-1].jkt == key.thumbprint


def test_a_bound_token_without_its_key_is_dropped_not_sent_as_bearer(
    offering: FakeServers, tmp_path: Path
) -> None:
    path = tmp_path / "client.json"
    assert Client(offering, FileStorage(path)).call().status_code == 200
    document = json.loads(path.read_text())
    document["dpop_keys"] = {}
    path.write_text(json.dumps(document))
    again = Client(offering, FileStorage(path))
    assert again.call().status_code == 200
    assert len(offering.token_requests) == 2  # new tokens for a new key
    assert all(a is None or a.startswith("DPoP ") for a in offering.resource_requests)
    assert offering.resource_proofs[-1].jkt == again.jkt


def test_required_does_not_use_stored_bearer_tokens(offering: FakeServers, tmp_path: Path) -> None:
    path = tmp_path / "client.json"
    assert Client(offering, FileStorage(path), dpop="off").call().status_code == 200
    required = Client(offering, FileStorage(path), dpop="required")
    assert required.call().status_code == 200
    assert len(offering.token_requests) == 2
    assert offering.token_proofs[-1] is not None
    assert required.auth.tokens is not None
    assert required.auth.tokens.bound


@pytest.mark.anyio
async def test_the_async_client_sends_the_same_proofs(offering: FakeServers) -> None:
    offering.rs_nonce = "rs-nonce-async"
    auth = OAuth(
        offering.resource,
        credentials=ClientCredentials("svc", "s3cret"),
        grant=ClientCredentialsGrant(),
        policy=Policy(clock=offering.clock),
    )
    transport = httpx2.ASGITransport(app=offering.app())
    async with httpx2.AsyncClient(transport=transport, auth=auth) as http:
        responses = [await http.post(offering.resource, json=PING) for _ in range(2)]
    assert [r.status_code for r in responses] == [200, 200]
    assert [p.nonce for p in offering.resource_proofs] == ["rs-nonce-async"] * 2
    assert auth.tokens is not None
    assert auth.tokens.bound
