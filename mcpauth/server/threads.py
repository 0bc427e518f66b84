"""Blocking work (database, password hashing, signing) off the event loop.

The event loop's default executor: a hop costs tens of microseconds where
``anyio.to_thread.run_sync`` costs several times that, and its worker count (cores + 4)
bounds how many database calls run at once. The caller's context variables (the request id
of the log lines) go along.

Blocking code that finds it must wait for the network first (a client's metadata document or
keys at a URL the client chose) must not wait in one of those threads: a host that never
answers would hold it, and a dozen such requests would stall every database call. It calls
:func:`await_on_loop` instead, which suspends the call: :func:`run_blocking` frees the thread,
awaits the I/O on the event loop, and runs the function again from the start with the outcome
at hand. The function must therefore have done nothing but read before it asks."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar, TypeVarTuple, Unpack, cast

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
MAX_SUSPENSIONS = 4  # a token request needs two at most: the client's document and its keys


class NeedsAwait(BaseException):
    """Raised by :func:`await_on_loop` in a worker thread; caught by :func:`run_blocking`.
    A ``BaseException`` so that no ``except Exception`` on the way swallows it."""

    def __init__(self, key: Hashable, start: Callable[[], Awaitable[Any]]) -> None:
        super().__init__(key)
        self.key = key
        self.start = start


@dataclass
class _Suspensions:
    outcomes: dict[Hashable, tuple[bool, Any]] = field(default_factory=dict)
    may_suspend: bool = True
    loop: asyncio.AbstractEventLoop | None = None


_current: contextvars.ContextVar[_Suspensions | None] = contextvars.ContextVar(
    "mcpauth_suspensions", default=None
)


def await_on_loop(key: Hashable, start: Callable[[], Awaitable[T]], blocking: Callable[[], T]) -> T:
    """The outcome of ``start()`` (a coroutine function), for blocking code.

    In a worker thread of :func:`run_blocking`: the outcome already awaited for ``key`` in
    this call (returned, or raised again), or else the call is suspended to await it on the
    event loop. Anywhere else (the command line, tests), ``blocking()`` runs here instead.
    """
    state = _current.get()
    if state is not None and key in state.outcomes:
        succeeded, outcome = state.outcomes[key]
        if succeeded:
            return cast(T, outcome)
        raise outcome
    if state is None or not state.may_suspend:
        return blocking()
    raise NeedsAwait(key, start)


def wait_on_loop(start: Callable[[], Awaitable[T]], timeout: float) -> T:
    """The outcome of ``start()`` run on the event loop, this worker thread waiting for it (at
    most ``timeout`` seconds). Unlike :func:`await_on_loop` the call is not suspended and run
    again, so it may follow writes; it holds a thread meanwhile, so it is only for rare calls
    to servers the operator chose (an upstream provider's token endpoint), never for a URL a
    client named. Outside :func:`run_blocking` (the command line, tests) it runs here.

    Raises:
        TimeoutError: ``start()`` took longer than ``timeout``.
    """

    async def bounded() -> T:
        return await asyncio.wait_for(start(), timeout)

    state = _current.get()
    if state is None or state.loop is None:
        return asyncio.run(bounded())
    future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(bounded(), state.loop)
    try:
        return future.result(timeout + 1)
    except TimeoutError:
        future.cancel()
        raise


async def run_blocking(func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
    """Run ``func(*args)`` in a worker thread and wait for it; whatever it needs from
    :func:`await_on_loop` is awaited here, between runs, holding no thread."""
    loop = asyncio.get_running_loop()
    state = _Suspensions(loop=loop)
    for attempt in range(1, MAX_SUSPENSIONS + 2):
        context = contextvars.copy_context()
        context.run(_current.set, state)
        call = functools.partial(context.run, func, *args)
        try:
            return await loop.run_in_executor(None, call)
        except NeedsAwait as needed:
            state.may_suspend = attempt < MAX_SUSPENSIONS
            try:
                state.outcomes[needed.key] = (True, await needed.start())
            except Exception as exc:  # noqa: BLE001 - raised again in the thread, for its caller
                state.outcomes[needed.key] = (False, exc)
    raise AssertionError("unreachable: the last run may not suspend")
