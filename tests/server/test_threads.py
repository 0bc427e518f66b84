"""Worker threads never wait for the network: what a request needs from a URL a client named
is loaded on the event loop first and passed in; a worker thread asked for a document that was
not loaded refuses at once, without fetching."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from types import CodeType

import pytest
from starlette.applications import Starlette

from mcpauth.errors import InvalidClient
from mcpauth.server import threads
from mcpauth.server.clients.directory import NOTHING_LOADED, ClientDirectory, Loaded, NotLoaded
from mcpauth.server.clients.ssrf import FetchedResponse
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.models import Client
from mcpauth.server.threads import run_blocking, wait_on_loop

DOCUMENT_URL = "https://app.example.com/client.json"


class Counting:
    """A fetcher that counts the calls it gets and never answers one."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def aget(self, url: str) -> FetchedResponse:
        self.calls.append(url)
        raise AssertionError("a worker thread asked for the network")

    def get(self, url: str) -> FetchedResponse:
        self.calls.append(url)
        raise AssertionError("a worker thread asked for the network")


def test_run_blocking_runs_in_a_worker_thread_with_the_callers_context() -> None:
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")

    def where() -> tuple[str, str]:
        return threading.current_thread().name, request_id.get()

    async def main() -> tuple[str, str]:
        request_id.set("r-1")
        return await run_blocking(where)

    name, seen = asyncio.run(main())
    assert name != threading.main_thread().name
    assert seen == "r-1"


def test_an_exception_in_the_worker_thread_is_raised_in_the_caller() -> None:
    def refuse() -> None:
        raise InvalidClient("no")

    async def main() -> None:
        await run_blocking(refuse)

    with pytest.raises(InvalidClient, match="no"):
        asyncio.run(main())


def test_a_caller_that_gives_up_gets_nothing_set_on_its_cancelled_future() -> None:
    release = threading.Event()
    errors: list[dict[str, object]] = []

    async def main() -> str:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        waiting = asyncio.ensure_future(run_blocking(release.wait, 10.0))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()  # the abandoned call ends now; its outcome goes nowhere
        return await run_blocking(lambda: "next")

    assert asyncio.run(main()) == "next"
    assert errors == []


def test_a_call_that_outlives_its_loop_does_not_cost_a_worker() -> None:
    release = threading.Event()

    async def abandon() -> asyncio.Future[bool]:
        abandoned = asyncio.ensure_future(run_blocking(release.wait, 10.0))
        await asyncio.sleep(0)  # submitted; asyncio.run then cancels it and closes the loop
        return abandoned

    asyncio.run(abandon())
    release.set()
    # every worker at once: one lost to the closed loop would leave the barrier short
    barrier = threading.Barrier(threads.WORKERS, timeout=10)

    async def all_at_once() -> list[int]:
        return await asyncio.gather(*(run_blocking(barrier.wait) for _ in range(threads.WORKERS)))

    assert sorted(asyncio.run(all_at_once())) == list(range(threads.WORKERS))


def test_the_replay_machinery_is_gone() -> None:
    assert not hasattr(threads, "await_on_loop")
    assert not hasattr(threads, "NeedsAwait")
    assert not hasattr(threads, "MAX_SUSPENSIONS")


def _names(code: CodeType) -> set[str]:
    """The global and attribute names ``code`` (and the functions inside it) refer to."""
    nested = (c for c in code.co_consts if isinstance(c, CodeType))
    return set(code.co_names).union(*(_names(c) for c in nested))


NETWORK = {"gate", "_fetch", "_fetcher", "load_document", "load_keys", "registered", "aget"}


def test_no_plain_method_of_the_directory_can_reach_the_network() -> None:
    # a worker thread calls plain functions; every way to the fetch gate is a coroutine
    plain = {
        name: member
        for name, member in vars(ClientDirectory).items()
        if inspect.isfunction(member) and not inspect.iscoroutinefunction(member)
    }
    assert {"find", "jwks_for", "cached", "forget"} <= plain.keys()
    reaching = {
        name: _names(member.__code__) & NETWORK
        for name, member in plain.items()
        if name != "__init__" and _names(member.__code__) & NETWORK
    }
    assert reaching == {}
    for name in ("_fetch", "load_document", "load_keys", "registered"):
        assert inspect.iscoroutinefunction(getattr(ClientDirectory, name))


@pytest.fixture
def directory(app: Starlette) -> tuple[ClientDirectory, Database, Counting]:
    ctx = app.state.mcpauth
    fetcher = Counting()
    ctx.clients._fetcher = fetcher
    ctx.clients.gate._fetcher = fetcher
    return ctx.clients, ctx.db, fetcher


def test_a_document_not_loaded_is_refused_in_the_worker_thread_without_a_fetch(
    directory: tuple[ClientDirectory, Database, Counting],
) -> None:
    clients, database, fetcher = directory

    async def main() -> None:
        with pytest.raises(NotLoaded, match="was not loaded"):
            await run_blocking(clients.find, database, DOCUMENT_URL, NOTHING_LOADED)
        assert clients.gate.in_flight() == 0

    asyncio.run(main())
    assert fetcher.calls == []


def test_keys_not_loaded_are_refused_in_the_worker_thread_without_a_fetch(
    directory: tuple[ClientDirectory, Database, Counting],
) -> None:
    clients, _, fetcher = directory
    client = Client(
        client_id="bot",
        client_name="Bot",
        token_endpoint_auth_method="private_key_jwt",
        jwks_uri="https://keys.example.com/jwks.json",
    )
    with pytest.raises(InvalidClient, match="keys changed during the request"):
        asyncio.run(run_blocking(clients.jwks_for, client, Loaded()))
    assert fetcher.calls == []


def test_wait_on_loop_runs_on_the_callers_loop_from_a_worker_thread() -> None:
    async def answer() -> str:
        return "loop" if threading.current_thread() is threading.main_thread() else "elsewhere"

    async def main() -> str:
        return await run_blocking(wait_on_loop, answer, 5.0)

    assert asyncio.run(main()) == "loop"
    assert wait_on_loop(answer, 5.0) == "loop"  # outside a server call: run here
