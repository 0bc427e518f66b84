"""Per-tool scopes in ``tools/list`` (``ProtectedResourceMiddleware(filter_tools=True)``): a
caller is shown only the tools its token may call, so a client does not offer its user tools
that would be refused. The answer to a ``tools/list`` request is rewritten on its way out,
JSON bodies whole (bounded) and event streams event by event (each complete event as it
passes; nothing waits for the stream to end). Anything that is not a ``tools/list`` result
passes through untouched."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcpauth.middleware._asgi import Message, Send

MAX_LISTING_BYTES = 4 * 1024 * 1024  # a JSON tools/list answer larger than this passes as is


def _filtered(message: Any, allowed: Callable[[str], bool]) -> Any:
    """A JSON-RPC response (or batch) with the tools the caller may not call removed."""
    if isinstance(message, list):
        return [_filtered(item, allowed) for item in message]
    if not isinstance(message, dict):
        return message
    result = message.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return message
    tools: list[Any] = result["tools"]
    kept = [t for t in tools if not isinstance(t, dict) or allowed(str(t.get("name", "")))]
    return {**message, "result": {**result, "tools": kept}}


def _rewrite_json(body: bytes, allowed: Callable[[str], bool]) -> bytes:
    try:
        document = json.loads(body)
    except ValueError:
        return body
    return json.dumps(_filtered(document, allowed), separators=(",", ":")).encode()


def _rewrite_event(event: bytes, allowed: Callable[[str], bool]) -> bytes:
    """One server-sent event with its ``data:`` JSON rewritten (multi-line data joined)."""
    lines = event.split(b"\n")
    data = [line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:")]
    if not data:
        return event
    rewritten = _rewrite_json(b"\n".join(data), allowed)
    others = [line for line in lines if not line.startswith(b"data:")]
    return b"\n".join([*others, b"data: " + rewritten])


def filtering_send(send: Send, allowed: Callable[[str], bool]) -> Send:
    """``send`` for the answer to a ``tools/list`` request: the listed tools filtered."""
    kind = ""
    start: Message | None = None
    pending = b""

    async def filtered_send(message: Message) -> None:
        nonlocal kind, start, pending
        if message["type"] == "http.response.start":
            named = {k.lower(): v for k, v in message.get("headers", [])}
            content_type = named.get(b"content-type", b"").split(b";")[0].strip()
            kind = {b"application/json": "json", b"text/event-stream": "sse"}.get(content_type, "")
            if kind == "json":
                start = message  # sent with the rewritten length once the body is whole
                return
            await send(message)
            return
        if message["type"] != "http.response.body" or not kind:
            await send(message)
            return
        more = bool(message.get("more_body"))
        pending += message.get("body", b"")
        if kind == "json":
            if more and len(pending) <= MAX_LISTING_BYTES:
                return
            body = _rewrite_json(pending, allowed) if not more else pending
            assert start is not None
            headers: list[tuple[bytes, bytes]] = [
                (k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"
            ]
            if not more:
                headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": more})
            kind, pending = "", b""  # anything after is passed through as is
            return
        out = []
        normal = pending.replace(b"\r\n", b"\n")
        *events, pending = normal.split(b"\n\n")
        for event in events:
            out.append(_rewrite_event(event, allowed) + b"\n\n")
        if not more and pending:
            out.append(_rewrite_event(pending, allowed))
            pending = b""
        await send({"type": "http.response.body", "body": b"".join(out), "more_body": more})

    return filtered_send
