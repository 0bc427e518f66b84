"""A ``private_key_jwt`` client's keys at its ``jwks_uri`` in the one key-set cache: loaded on
the event loop through the fetch gate and read from memory by the worker thread; an assertion
naming a ``kid`` the keys lack refetches them, at most once a minute; a failure is refused with
``invalid_client`` and remembered during its back-off; a cap that declines says so. A stand-in
for the network (the real fetch of a real host is tests/e2e/test_jwks_uri_fetch.py)."""

from __future__ import annotations

import pytest
from freezegun import freeze_time

from mcpauth.errors import FetchError, InvalidClient
from mcpauth.server.clients.directory import NOTHING_LOADED, ClientDirectory, Loaded
from mcpauth.server.clients.fetch_admission import FetchLimits
from mcpauth.server.config import Settings
from mcpauth.server.storage.models import Client

from .test_fetchgate import run
from .test_key_sets import Network, jwks

URL = "https://keys.example.com/jwks.json"
CLIENT = Client(
    client_id="bot", client_name="Bot", token_endpoint_auth_method="private_key_jwt", jwks_uri=URL
)


def directory(
    settings: Settings, limits: FetchLimits | None = None
) -> tuple[ClientDirectory, Network]:
    clients = ClientDirectory(settings, fetch_limits=limits)
    network = Network()
    network.release.set()
    clients.gate._fetcher = network
    return clients, network


def test_keys_are_fetched_once_and_the_worker_thread_reads_them_from_memory(
    settings: Settings,
) -> None:
    clients, network = directory(settings)

    async def scenario() -> None:
        keys = await clients.load_keys(CLIENT, "192.0.2.1", kid="k1")
        assert isinstance(keys, dict)
        assert set(keys) == {"k1"}
        assert await clients.load_keys(CLIENT, "192.0.2.2", kid="k1") is keys
        assert network.started == [URL]
        assert clients.jwks_for(CLIENT, Loaded(key_sets={URL: keys})) is keys
        assert clients.jwks_for(CLIENT, NOTHING_LOADED) is keys  # fresh in memory

    run(scenario)


def test_an_unknown_kid_refetches_the_keys_at_most_once_a_minute(settings: Settings) -> None:
    clients, network = directory(settings)

    async def scenario() -> None:
        with freeze_time("2026-01-01 00:00:00", real_asyncio=True) as clock:
            await clients.load_keys(CLIENT, "192.0.2.1", kid="k1")
            network.document = jwks("k1", "k2")  # the client rotates its keys
            for _ in range(10):  # made-up or new kids within the minute: no fetch each
                clock.tick(5)
                keys = await clients.load_keys(CLIENT, "192.0.2.1", kid="k2")
                assert isinstance(keys, dict)
                assert set(keys) == {"k1"}
            assert len(network.started) == 1
            clock.tick(10)
            keys = await clients.load_keys(CLIENT, "192.0.2.1", kid="k2")
            assert isinstance(keys, dict)
            assert set(keys) == {"k1", "k2"}
            assert len(network.started) == 2

    run(scenario)


def test_a_failed_fetch_is_refused_and_remembered(settings: Settings) -> None:
    clients, network = directory(settings)
    network.error = FetchError(f"{URL}: no complete response")

    async def scenario() -> None:
        for _ in range(3):
            refused = await clients.load_keys(CLIENT, "192.0.2.1", kid="k1")
            assert isinstance(refused, InvalidClient)
            assert refused.description == "The client's jwks_uri cannot be fetched"  # no URL
        assert network.started == [URL]  # the back-off answered the others from memory
        with pytest.raises(InvalidClient, match="keys changed during the request"):
            clients.jwks_for(CLIENT, NOTHING_LOADED)  # nothing in memory: nothing fetched

    run(scenario)


def test_a_declined_fetch_says_which_cap_and_is_not_remembered(settings: Settings) -> None:
    clients, network = directory(settings, FetchLimits(per_address=0))

    async def scenario() -> None:
        refused = await clients.load_keys(CLIENT, "192.0.2.1", kid="k1")
        assert isinstance(refused, InvalidClient)
        assert refused.description.startswith("The client's jwks_uri was not fetched: too many")
        assert network.started == []
        clients.gate.limits = FetchLimits()
        assert isinstance(await clients.load_keys(CLIENT, "192.0.2.1", kid="k1"), dict)

    run(scenario)


def test_inline_keys_and_no_keys_need_no_fetch(settings: Settings) -> None:
    clients, network = directory(settings)
    inline = Client(
        client_id="inline", client_name="Inline", token_endpoint_auth_method="private_key_jwt",
        jwks=jwks("k9"),
    )  # fmt: skip

    async def scenario() -> None:
        assert await clients.load_keys(inline, "192.0.2.1", kid="k9") is None
        assert set(clients.jwks_for(inline, NOTHING_LOADED)) == {"k9"}
        bare = Client(client_id="bare", client_name="Bare")
        assert await clients.load_keys(bare, "192.0.2.1") is None
        with pytest.raises(InvalidClient, match="no registered keys"):
            clients.jwks_for(bare, NOTHING_LOADED)
        assert network.started == []

    run(scenario)
