"""``mcpauth proxy -- COMMAND``: serve an MCP stdio server as a protected Streamable HTTP
endpoint, built on the official MCP SDK's transports (imported only here, lazily).

Each MCP session gets its own subprocess (a stdio server speaks to exactly one client). The
session's owner, already bound by the middleware (MCP RS-19), is given to the subprocess in
``MCPAUTH_SUBJECT``, ``MCPAUTH_CLIENT`` and ``MCPAUTH_SCOPES``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mcpauth.middleware._asgi import Receive, Scope, Send, first_header, jsonrpc_error, send_json
from mcpauth.middleware.identity import verified_token

if TYPE_CHECKING:
    from mcp.server.streamable_http import StreamableHTTPServerTransport

__all__ = ["StdioBridge"]

logger = logging.getLogger("mcpauth.proxy")
_CLOSED = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


class StdioBridge:
    """ASGI app: Streamable HTTP in front, ``command`` on stdin/stdout behind.

    Raises:
        ValueError: ``command`` is empty.
    """

    def __init__(
        self, command: Sequence[str], *, env: dict[str, str] | None = None, max_sessions: int = 100
    ) -> None:
        if not command:
            raise ValueError("a command to run is required")
        self.command = list(command)
        self.env = dict(env or {})
        self.max_sessions = max_sessions
        self.sessions: dict[str, StreamableHTTPServerTransport] = {}
        self._group: TaskGroup | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http" or self._group is None:
            await send_json(send, 404, {"error": "not_found"})
            return
        session_id = first_header(scope, b"mcp-session-id")
        if session_id is None:
            await self._open_session(scope, receive, send)
            return
        transport = self.sessions.get(session_id)
        if transport is None:
            await send_json(send, 404, jsonrpc_error(-32001, "Session not found"))
            return
        await transport.handle_request(scope, receive, send)
        if transport.is_terminated:
            self.sessions.pop(session_id, None)

    async def _open_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        from mcp.server.streamable_http import StreamableHTTPServerTransport

        if scope["method"] != "POST":
            await send_json(send, 400, jsonrpc_error(-32600, "Missing Mcp-Session-Id"))
            return
        if len(self.sessions) >= self.max_sessions:
            await send_json(send, 503, jsonrpc_error(-32603, "Too many open sessions"))
            return
        transport = StreamableHTTPServerTransport(mcp_session_id=secrets.token_urlsafe(32))
        session_id = str(transport.mcp_session_id)
        assert self._group is not None
        await self._group.start(self._run_session, transport, self._session_env(scope))
        self.sessions[session_id] = transport
        status: list[int] = []

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        await transport.handle_request(scope, receive, watch)
        if not status or status[0] >= 400:
            self.sessions.pop(session_id, None)
            await transport.terminate()

    def _session_env(self, scope: Scope) -> dict[str, str]:
        env = dict(self.env)
        token = verified_token(scope)
        if token is not None:
            env.update(
                MCPAUTH_SUBJECT=token.subject or "",
                MCPAUTH_CLIENT=token.client_id,
                MCPAUTH_SCOPES=" ".join(token.scopes),
            )
        return env

    async def _run_session(
        self,
        transport: StreamableHTTPServerTransport,
        env: dict[str, str],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=env)
        try:
            async with (
                stdio_client(params) as (child_read, child_write),
                transport.connect() as (http_read, http_write),
            ):
                task_status.started()
                progress: dict[Any, Any] = {}
                async with anyio.create_task_group() as pumps:
                    pumps.start_soon(_to_child, http_read, child_write, progress)
                    with suppress(*_CLOSED):
                        await _to_client(child_read, http_write, progress)
                    pumps.cancel_scope.cancel()
        finally:
            self.sessions.pop(str(transport.mcp_session_id), None)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._group = group
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self._group = None
                    for transport in list(self.sessions.values()):
                        await transport.terminate()
                    group.cancel_scope.cancel()
                    break
        await send({"type": "lifespan.shutdown.complete"})


async def _to_child(source: Any, sink: Any, progress: dict[Any, Any]) -> None:
    with suppress(*_CLOSED):
        await _pump_to_child(source, sink, progress)


async def _pump_to_child(source: Any, sink: Any, progress: dict[Any, Any]) -> None:
    from mcp.shared.message import SessionMessage

    async for item in source:
        if isinstance(item, Exception):
            continue
        message = item.message
        params = getattr(message, "params", None)
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and "progressToken" in meta and hasattr(message, "id"):
            progress[meta["progressToken"]] = message.id
        await sink.send(SessionMessage(message))
    await sink.aclose()


async def _to_client(source: Any, sink: Any, progress: dict[Any, Any]) -> None:
    from mcp.shared.message import ServerMessageMetadata, SessionMessage

    async for item in source:
        if isinstance(item, Exception):
            logger.warning("stdio server sent an unreadable message")
            continue
        message = item.message
        related = None
        params = getattr(message, "params", None)
        if getattr(message, "method", None) == "notifications/progress" and isinstance(
            params, dict
        ):
            related = progress.get(params.get("progressToken"))
        metadata = (
            ServerMessageMetadata(related_request_id=related) if related is not None else None
        )
        await sink.send(SessionMessage(message, metadata=metadata))
