"""The ASGI types every part names, and the one bounded reader of an ASGI request body,
shared by the authorization server and the middleware; each maps its two failures to its own
response (the server to ``413`` ``invalid_request`` and a dropped request, the middleware to
its JSON-RPC refusal)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = [
    "ASGIApp",
    "BodyIncomplete",
    "BodyTooLarge",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "read_capped_body",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyTooLarge(Exception):
    """The request body (or the length it declares) is larger than the bound."""


class BodyIncomplete(Exception):
    """The client went away before the body was complete; ``partial`` holds what came."""

    def __init__(self, partial: bytes) -> None:
        super().__init__("the client disconnected before the request body was complete")
        self.partial = partial


async def read_capped_body(
    receive: Receive, limit: int, *, declared_length: str | None = None
) -> bytes:
    """The whole request body from ASGI ``receive``, refused as soon as it passes ``limit``
    bytes, without reading further. ``declared_length`` (a ``Content-Length`` value) that is
    not a number or exceeds ``limit`` is refused before anything is read.

    Raises:
        BodyTooLarge: the body, or its declared length, exceeds ``limit``.
        BodyIncomplete: a message other than ``http.request`` (a disconnect) came first.
    """
    if declared_length is not None and (
        not declared_length.isdigit() or int(declared_length) > limit
    ):
        raise BodyTooLarge
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        whole = bytes(message.get("body", b""))  # the usual case: the body in one message
        if len(whole) > limit:
            raise BodyTooLarge
        return whole
    body = bytearray()
    while True:
        if message["type"] != "http.request":
            raise BodyIncomplete(bytes(body))
        body.extend(message.get("body", b""))
        if len(body) > limit:
            raise BodyTooLarge
        if not message.get("more_body", False):
            return bytes(body)
        message = await receive()
