"""Small pure-ASGI helpers: the typed aliases (from :mod:`mcpauth.asgi`), header access, JSON
responses, body buffering."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from mcpauth.asgi import (
    ASGIApp,
    BodyIncomplete,
    BodyTooLarge,
    Message,
    Receive,
    Scope,
    Send,
    read_capped_body,
)

__all__ = [
    "ASGIApp",
    "BodyTooLarge",
    "Headers",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "first_header",
    "header_values",
    "jsonrpc_error",
    "outside_http",
    "read_body",
    "read_headers",
    "refuse_websocket",
    "replay",
    "send_json",
]

Headers = dict[bytes, list[bytes]]


def header_values(scope: Scope, name: bytes) -> list[bytes]:
    """Every value of header ``name`` (lowercase) in the request."""
    return [value for key, value in scope.get("headers", ()) if key.lower() == name]


def read_headers(
    scope: Scope, names: frozenset[bytes], *, strip: frozenset[bytes]
) -> tuple[Headers, list[tuple[bytes, bytes]]]:
    """In one pass over the request's headers: the values of each header of ``names``
    (lowercase) it carries, in order (a header it lacks has no entry), and its headers less
    those of ``strip``."""
    found: Headers = {}
    kept: list[tuple[bytes, bytes]] = []
    keep = kept.append
    for header in scope.get("headers", ()):
        name = header[0].lower()
        if name in names:
            if name in found:
                found[name].append(header[1])
            else:
                found[name] = [header[1]]
            if name in strip:
                continue
        keep(header)
    return found, kept


def first_header(scope: Scope, name: bytes) -> str | None:
    values = header_values(scope, name)
    return values[0].decode("latin-1") if values else None


async def send_json(
    send: Send,
    status: int,
    body: Any,
    headers: Iterable[tuple[str, str]] = (),
) -> None:
    """Send a complete JSON response."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"cache-control", b"no-store"),
    ]
    raw_headers.extend((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers)
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


async def refuse_websocket(send: Send) -> None:
    """Refuse a WebSocket handshake (the server answers 403) from an HTTP-only app."""
    await send({"type": "websocket.close", "code": 1008})


async def outside_http(
    scope: Scope, receive: Receive, send: Send, lifespan: Callable[[Receive, Send], Awaitable[None]]
) -> bool:
    """What an HTTP-only app does with any other scope: the lifespan protocol runs
    ``lifespan``, a WebSocket handshake is refused. True when ``scope`` was one of them."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return True
    if scope["type"] == "websocket":
        await refuse_websocket(send)
        return True
    return False


def jsonrpc_error(code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC 2.0 error object without a request id."""
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing more than ``limit`` bytes.

    Raises:
        BodyTooLarge: the body exceeds ``limit``.
    """
    try:
        return await read_capped_body(receive, limit)
    except BodyIncomplete as exc:
        return exc.partial  # the app sees the disconnect on its own next receive


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields ``body`` once, unchanged, then defers to the original."""
    sent = False

    async def replaying_receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replaying_receive
