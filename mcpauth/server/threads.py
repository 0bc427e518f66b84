"""Blocking work (database, password hashing, signing) off the event loop.

The event loop's default executor: a hop costs tens of microseconds where
``anyio.to_thread.run_sync`` costs several times that, and its worker count (cores + 4)
bounds how many database calls run at once. The caller's context variables (the request id
of the log lines) go along.

A worker thread never waits for a URL a client named (a metadata document, a ``jwks_uri``): a
host that never answers would hold the thread, and a dozen such requests would stall every
database call. Load, then transact: the caller awaits that I/O on the event loop first and
passes what it got to :func:`run_blocking` (``clients/directory.py``, ``tokens/endpoint.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple, Unpack

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "mcpauth_loop", default=None
)


def wait_on_loop(start: Callable[[], Awaitable[T]], timeout: float) -> T:
    """The outcome of ``start()`` run on the event loop, this worker thread waiting for it (at
    most ``timeout`` seconds). It holds a thread meanwhile, so it is only for rare calls to
    servers the operator chose (an upstream provider's token endpoint), never for a URL a
    client named. Outside :func:`run_blocking` (the command line, tests) it runs here.

    Raises:
        TimeoutError: ``start()`` took longer than ``timeout``.
    """

    async def bounded() -> T:
        return await asyncio.wait_for(start(), timeout)

    loop = _loop.get()
    if loop is None:
        return asyncio.run(bounded())
    future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(bounded(), loop)
    try:
        return future.result(timeout + 1)
    except TimeoutError:
        future.cancel()
        raise


async def run_blocking(func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
    """Run ``func(*args)`` in a worker thread and wait for it. Whatever it needs from the
    network must be awaited before, and passed in ``args``."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    context.run(_loop.set, loop)
    return await loop.run_in_executor(None, functools.partial(context.run, func, *args))
