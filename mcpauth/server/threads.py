"""Blocking work (database, password hashing, signing) off the event loop.

The event loop's default executor: a hop costs tens of microseconds where
``anyio.to_thread.run_sync`` costs several times that, and its worker count (cores + 4)
bounds how many database calls run at once. The caller's context variables (the request id
of the log lines) go along."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import TypeVar, TypeVarTuple, Unpack

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


async def run_blocking(func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
    """Run ``func(*args)`` in a worker thread and wait for it."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args)
    return await asyncio.get_running_loop().run_in_executor(None, call)
