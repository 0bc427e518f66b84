"""The steps a client flow yields (:mod:`mcpauth.client.flow` says what a runner does with
each) and the types of the flow itself."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal

from mcpauth.client._http import HTTPRequest
from mcpauth.client.device import ShowUserCode, Wait
from mcpauth.client.storage import TokenStorage

StorageMethod = Literal[
    "get_discovery",
    "set_discovery",
    "get_client",
    "set_client",
    "get_tokens",
    "set_tokens",
    "delete_tokens",
    "get_dpop_key",
    "set_dpop_key",
]


@dataclass(frozen=True)
class Resend:
    """Send the caller's request with this ``Authorization`` value (``None``: without one);
    when ``dpop`` is given, also a ``DPoP`` header: ``dpop(method, url)`` of the request."""

    authorization: str | None
    dpop: Callable[[str, str], str] | None = None


@dataclass(frozen=True)
class Lock:
    """Hold the shared lock from here to the next :class:`Resend` (or the end of the flow)."""


@dataclass(frozen=True)
class RedirectURI:
    """Ask the redirect handler which redirect URI to use (it may bind a listener now)."""


@dataclass(frozen=True)
class Authorize:
    """Send the user to ``url``; the answer is the URL the server redirected back to."""

    url: str


@dataclass(frozen=True)
class StorageCall:
    """Call ``method`` of ``storage`` with ``args``; the answer is what it returns.

    Storage may read and write files, so the runner chooses where the call runs: ``blocking``
    is the storage's own ``blocking`` attribute (true when it has none), and an async runner
    makes a blocking call in a worker thread, off the event loop.
    """

    storage: TokenStorage
    method: StorageMethod
    args: tuple[Any, ...] = ()

    @property
    def blocking(self) -> bool:
        return bool(getattr(self.storage, "blocking", True))

    def run(self) -> Any:
        return getattr(self.storage, self.method)(*self.args)


Step = HTTPRequest | Resend | Lock | StorageCall | RedirectURI | Authorize | ShowUserCode | Wait
Flow = Generator[Step, Any, Any]
