"""Blocking calls that must wait for the network hand the wait to the event loop: the worker
thread is free meanwhile, and the call runs again with the outcome."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest

from mcpauth.server.threads import MAX_SUSPENSIONS, await_on_loop, run_blocking

T = TypeVar("T")


def on_one_thread(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run ``scenario`` on a loop whose executor has a single worker thread."""

    async def main() -> T:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1) as executor:
            loop.set_default_executor(executor)
            return await asyncio.wait_for(scenario(), 10)

    return asyncio.run(main())


def test_a_call_waiting_for_the_network_holds_no_worker_thread() -> None:
    async def scenario() -> None:
        asked, answer = asyncio.Event(), asyncio.Event()
        runs: list[str] = []

        async def slow_host() -> str:
            asked.set()
            await answer.wait()
            return "document"

        def needs_document() -> str:
            runs.append(threading.current_thread().name)
            return await_on_loop("doc", slow_host, lambda: "fetched in the thread")

        waiting = asyncio.ensure_future(run_blocking(needs_document))
        await asked.wait()
        # the only worker thread is free for database work while the host takes its time
        assert await run_blocking(lambda: "database") == "database"
        assert not waiting.done()
        answer.set()
        assert await waiting == "document"
        assert len(runs) == 2  # run again from the start, with the outcome at hand

    on_one_thread(scenario)


def test_a_failed_wait_is_raised_in_the_thread_where_the_caller_handles_it() -> None:
    async def failing() -> str:
        raise LookupError("no such document")

    def caller() -> str:
        try:
            return await_on_loop("doc", failing, lambda: "unused")
        except LookupError as exc:
            return f"handled: {exc}"

    assert asyncio.run(run_blocking(caller)) == "handled: no such document"


def test_one_outcome_per_key_is_reused_within_the_call() -> None:
    started: list[str] = []

    async def fetch() -> str:
        started.append("fetch")
        return "document"

    def twice() -> list[str]:
        return [await_on_loop("doc", fetch, lambda: "unused") for _ in range(2)]

    assert asyncio.run(run_blocking(twice)) == ["document", "document"]
    assert started == ["fetch"]


def test_suspensions_are_bounded_and_then_the_wait_happens_in_the_thread() -> None:
    async def fetch() -> str:
        return "awaited"

    def greedy() -> list[str]:
        return [await_on_loop(n, fetch, lambda: "blocking") for n in range(MAX_SUSPENSIONS + 2)]

    outcomes = asyncio.run(run_blocking(greedy))
    assert outcomes == ["awaited"] * MAX_SUSPENSIONS + ["blocking"] * 2


def test_outside_a_server_call_the_blocking_way_is_used() -> None:
    async def never() -> str:
        pytest.fail("nothing may be awaited outside run_blocking")

    assert await_on_loop("doc", never, lambda: "blocking") == "blocking"
