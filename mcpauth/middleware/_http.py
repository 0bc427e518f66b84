"""The HTTP client a verifier reaches its authorization server with (or the proxy its
upstream): the caller's own (the caller closes it), or one this side creates on first use and
closes in ``aclose()``; what never fetches anything never creates one. :class:`AsyncClosing`
gives each owner of such a client ``async with``."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Self

import httpx2

DEFAULT_TIMEOUT = httpx2.Timeout(5.0)


def _default_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(timeout=DEFAULT_TIMEOUT)


class LazyClient:
    """``given`` when there is one; else an ``httpx2.AsyncClient`` made by ``factory`` on the
    first :meth:`get` and closed by :meth:`aclose` (a later :meth:`get` makes a new one)."""

    def __init__(
        self,
        given: httpx2.AsyncClient | None = None,
        *,
        factory: Callable[[], httpx2.AsyncClient] = _default_client,
    ) -> None:
        self._given = given
        self._factory = factory
        self._own: httpx2.AsyncClient | None = None

    @property
    def current(self) -> httpx2.AsyncClient | None:
        """The client in use: the given one, the one created here, or ``None`` before the
        first :meth:`get` (and after :meth:`aclose`)."""
        return self._given if self._given is not None else self._own

    def get(self) -> httpx2.AsyncClient:
        if self._given is not None:
            return self._given
        if self._own is None:
            self._own = self._factory()
        return self._own

    async def aclose(self) -> None:
        """Close the client created here, if any; a given client is left to its owner."""
        own, self._own = self._own, None
        if own is not None:
            await own.aclose()


class AsyncClosing:
    """``async with`` for a class with ``aclose()``: leaving the block closes it."""

    async def aclose(self) -> None:
        """Close what this object opened."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
