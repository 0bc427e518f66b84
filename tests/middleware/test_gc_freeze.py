"""``ProtectedResourceMiddleware(gc_freeze=True)``: once the application's lifespan start-up is
complete, garbage is collected once and what is left is frozen (``gc.freeze()``), before the
server is told start-up is complete; by default nothing is frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from starlette.applications import Starlette

from mcpauth.middleware import ProtectedResourceMiddleware

from .helpers import ISSUER, RESOURCE


class Node:
    """A start-up object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the test run collects as usual


async def start_and_stop(frozen: bool) -> tuple[int, weakref.ref[Node]]:
    """Run the lifespan of an app whose start-up leaves cyclic garbage behind; the number of
    frozen objects when start-up complete reaches the server, and a reference to the
    garbage."""
    left: list[weakref.ref[Node]] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        left.append(weakref.ref(Node()))  # unreachable once made, but in a cycle
        yield

    middleware = ProtectedResourceMiddleware(
        Starlette(lifespan=lifespan),
        resource=RESOURCE,
        authorization_servers=[ISSUER],
        gc_freeze=frozen,
    )
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    at_startup: list[int] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            at_startup.append(gc.get_freeze_count())

    await middleware({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    return at_startup[0], left[0]


@pytest.mark.anyio
async def test_gc_freeze_collects_then_freezes_what_start_up_left() -> None:
    frozen, garbage = await start_and_stop(True)
    assert frozen > 1000  # the imported modules and the app, at least
    assert garbage() is None  # collected first, not frozen for good


@pytest.mark.anyio
async def test_nothing_is_frozen_by_default() -> None:
    gc.disable()  # so that only a freeze could move anything: none happens
    try:
        frozen, garbage = await start_and_stop(False)
        assert frozen == 0
        assert garbage() is not None  # still waiting for a collection
    finally:
        gc.enable()
