"""``tools/list`` filtered to the tools a caller may call: by per-tool scopes
(``ProtectedResourceMiddleware(filter_tools=True)``) and by the tool policy
(``tool_policy=``), so a client does not offer its user tools that would be refused. The answer
to a ``tools/list`` request is rewritten on its way out, JSON bodies whole (bounded) and event
streams event by event (each complete event as it passes; nothing waits for the stream to end).
Anything that is not a ``tools/list`` result passes through untouched."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from mcpauth.middleware._asgi import Message, Send

MAX_LISTING_BYTES = 4 * 1024 * 1024  # a JSON tools/list answer larger than this passes as is

# the names of listed tools -> those the caller is shown
Visible = Callable[[Collection[str]], Awaitable[Collection[str]]]


def _tool_lists(message: Any) -> list[list[Any]]:
    """The ``result.tools`` lists of a JSON-RPC response (or batch)."""
    if isinstance(message, list):
        return [tools for item in message for tools in _tool_lists(item)]
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return []
    return [result["tools"]]


def _name(tool: Any) -> str | None:
    return str(tool.get("name", "")) if isinstance(tool, dict) else None


def _filtered(message: Any, shown: Collection[str]) -> Any:
    """A JSON-RPC response (or batch) with the tools not in ``shown`` removed."""
    if isinstance(message, list):
        return [_filtered(item, shown) for item in message]
    if not _tool_lists(message):
        return message
    result = message["result"]
    kept = [tool for tool in result["tools"] if _name(tool) is None or _name(tool) in shown]
    return {**message, "result": {**result, "tools": kept}}


async def _rewrite_json(body: bytes, visible: Visible) -> bytes:
    try:
        document = json.loads(body)
    except ValueError:
        return body
    lists = _tool_lists(document)
    if not lists:
        return body
    names = {name for tools in lists for name in map(_name, tools) if name is not None}
    shown = set(await visible(names))
    return json.dumps(_filtered(document, shown), separators=(",", ":")).encode()


async def _rewrite_event(event: bytes, visible: Visible) -> bytes:
    """One server-sent event with its ``data:`` JSON rewritten (multi-line data joined)."""
    lines = event.split(b"\n")
    data = [line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:")]
    if not data:
        return event
    rewritten = await _rewrite_json(b"\n".join(data), visible)
    others = [line for line in lines if not line.startswith(b"data:")]
    return b"\n".join([*others, b"data: " + rewritten])


def filtering_send(send: Send, visible: Visible) -> Send:
    """``send`` for the answer to a ``tools/list`` request: the listed tools filtered to those
    ``visible`` keeps."""
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
            body = await _rewrite_json(pending, visible) if not more else pending
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
            out.append(await _rewrite_event(event, visible) + b"\n\n")
        if not more and pending:
            out.append(await _rewrite_event(pending, visible))
            pending = b""
        await send({"type": "http.response.body", "body": b"".join(out), "more_body": more})

    return filtered_send
