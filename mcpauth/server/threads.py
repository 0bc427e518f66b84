"""Blocking work (database, password hashing, signing) off the event loop.

A small pool of worker threads of its own, fed by one queue: a hop costs a few microseconds of
CPU where the loop's executor (a ``concurrent.futures`` future chained to an asyncio one)
costs about 20 and ``anyio.to_thread.run_sync`` several times that. Its worker count (cores +
4, as the executor's) bounds how many database calls run at once. The caller's context
variables (the request id of the log lines) go along.

A worker thread never waits for a URL a client named (a metadata document, a ``jwks_uri``): a
host that never answers would hold the thread, and a dozen such requests would stall every
database call. Load, then transact: the caller awaits that I/O on the event loop first and
passes what it got to :func:`run_blocking` (``clients/directory.py``, ``tokens/endpoint.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, TypeVarTuple, Unpack

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


WORKERS = min(32, (os.cpu_count() or 1) + 4)

# (loop, future, context, func, args) of each call waiting for a worker
_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Any, Any]


class _Workers:
    """:data:`WORKERS` daemon threads (the process never waits for them at exit), started with
    the first call, each running one call at a time from the shared queue."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False

    def submit(self, call: _Call) -> None:
        if not self._started:
            with self._lock:
                if not self._started:
                    for n in range(WORKERS):
                        name = f"mcpauth-worker-{n + 1}"
                        threading.Thread(target=self._work, name=name, daemon=True).start()
                    self._started = True
        self._calls.put(call)

    def _work(self) -> None:
        while True:
            _run(self._calls.get())


def _run(call: _Call) -> None:
    loop, future, context, func, args = call
    try:
        result = context.run(func, *args)
    except BaseException as error:  # noqa: BLE001 (raised in the awaiting coroutine)
        _settle(loop, _fail, future, error)
    else:
        _settle(loop, _succeed, future, result)


def _settle(loop: asyncio.AbstractEventLoop, how: Any, future: Any, outcome: Any) -> None:
    """Hand the outcome to the loop, unless it is gone (the caller gave up and its loop ended)."""
    with contextlib.suppress(RuntimeError):  # closed, also between the check and the call
        if not loop.is_closed():
            loop.call_soon_threadsafe(how, future, outcome)


def _succeed(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # the caller may have been cancelled meanwhile
        future.set_result(result)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


_workers = _Workers()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
    os.register_at_fork(after_in_child=_workers.reset)


async def run_blocking(func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
    """Run ``func(*args)`` in a worker thread and wait for it. Whatever it needs from the
    network must be awaited before, and passed in ``args``."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    context.run(_loop.set, loop)
    future: asyncio.Future[T] = loop.create_future()
    _workers.submit((loop, future, context, func, args))
    return await future
