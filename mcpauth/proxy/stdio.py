"""``mcpauth proxy -- COMMAND``: serve an MCP stdio server as a protected Streamable HTTP
endpoint, built on the official MCP SDK's transports (imported only here, lazily).

Each MCP session gets its own subprocess (a stdio server speaks to exactly one client). The
session's owner, already bound by the middleware (MCP RS-19), is given to the subprocess in
``MCPAUTH_SUBJECT``, ``MCPAUTH_CLIENT`` and ``MCPAUTH_SCOPES``.

Children are a shared, finite resource, so one caller cannot take them all:

- at most ``max_sessions_per_subject`` open sessions per subject (the token's issuer and
  ``sub``; the client for tokens without ``sub``): one more gets 429 with ``Retry-After``;
- at most ``max_sessions`` children in all: one more gets 503 with ``Retry-After``;
- a session without a request in flight for ``idle_timeout`` seconds is reaped: its child is
  stopped and its slot freed (a later request with its id gets 404, so the client opens a new
  session). Idle sessions are reaped every ``reap_interval`` seconds and before any refusal.

Refusals carry a JSON-RPC error body, as the Streamable HTTP transport expects. ``clock``
(seconds; :func:`time.monotonic` by default) is injectable for tests.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mcpauth.middleware._asgi import (
    Receive,
    Scope,
    Send,
    first_header,
    jsonrpc_error,
    outside_http,
    send_json,
)
from mcpauth.middleware.identity import verified_token
from mcpauth.oauth import format_scope

if TYPE_CHECKING:
    from mcp.server.streamable_http import StreamableHTTPServerTransport

__all__ = ["BridgeSession", "StdioBridge"]

logger = logging.getLogger("mcpauth.proxy")
_CLOSED = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
DEFAULT_MAX_SESSIONS = 100
DEFAULT_MAX_SESSIONS_PER_SUBJECT = 10
DEFAULT_IDLE_TIMEOUT = 900.0
SERVER_BUSY = -32000
Owner = tuple[str | None, str, str]


@dataclass(eq=False)
class BridgeSession:
    """One MCP session: its transport, its owner, and when it was last used."""

    transport: StreamableHTTPServerTransport
    owner: Owner
    last_seen: float
    active: int = 0
    cancel: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def id(self) -> str:
        return str(self.transport.mcp_session_id)


def _owner(scope: Scope) -> Owner:
    token = verified_token(scope)
    if token is None:
        return (None, "anonymous", "")
    if token.subject is not None:
        return (token.issuer, "sub", token.subject)
    return (token.issuer, "client", token.client_id)


class StdioBridge:
    """ASGI app: Streamable HTTP in front, ``command`` on stdin/stdout behind (limits: see the
    module docstring).

    Raises:
        ValueError: ``command`` is empty, or a limit is not positive.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_sessions_per_subject: int = DEFAULT_MAX_SESSIONS_PER_SUBJECT,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        reap_interval: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not command:
            raise ValueError("a command to run is required")
        if max_sessions < 1 or max_sessions_per_subject < 1 or not idle_timeout > 0:
            raise ValueError("session limits and the idle timeout must be positive")
        self.command = list(command)
        self.env = dict(env or {})
        self.max_sessions = max_sessions
        self.max_sessions_per_subject = max_sessions_per_subject
        self.idle_timeout = idle_timeout
        self.reap_interval = reap_interval or min(idle_timeout / 4, 30.0)
        self._clock = clock or time.monotonic
        self.sessions: dict[str, BridgeSession] = {}
        self._group: TaskGroup | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await outside_http(scope, receive, send, self._lifespan):
            return
        if scope["type"] != "http" or self._group is None:
            await send_json(send, 404, {"error": "not_found"})
            return
        session_id = first_header(scope, b"mcp-session-id")
        if session_id is None:
            await self._open_session(scope, receive, send)
            return
        session = self.sessions.get(session_id)
        if session is None:
            await send_json(send, 404, jsonrpc_error(-32001, "Session not found"))
            return
        await self._handle(session, scope, receive, send)
        if session.transport.is_terminated:
            await self._close(session)

    async def _handle(
        self, session: BridgeSession, scope: Scope, receive: Receive, send: Send
    ) -> None:
        session.active += 1
        session.last_seen = self._clock()
        try:
            await session.transport.handle_request(scope, receive, send)
        finally:
            session.active -= 1
            session.last_seen = self._clock()

    async def _open_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        from mcp.server.streamable_http import StreamableHTTPServerTransport

        if scope["method"] != "POST":
            await send_json(send, 400, jsonrpc_error(-32600, "Missing Mcp-Session-Id"))
            return
        owner = _owner(scope)
        if self._refused(owner):
            await self.reap_idle()
        refusal = self._refused(owner)
        if refusal is not None:
            code, message, retry_after = refusal
            logger.warning("refused a new stdio session (%d): %s", code, message)
            await send_json(
                send, code, jsonrpc_error(SERVER_BUSY, message), [("retry-after", retry_after)]
            )
            return
        transport = StreamableHTTPServerTransport(mcp_session_id=secrets.token_urlsafe(32))
        session = BridgeSession(transport, owner, self._clock())
        # The slot is taken before any await, so concurrent requests cannot overshoot a cap.
        self.sessions[session.id] = session
        assert self._group is not None
        try:
            await self._group.start(self._run_session, session, self._session_env(scope))
        except OSError as exc:
            self.sessions.pop(session.id, None)
            logger.error("cannot start the MCP stdio server %r: %s", self.command[0], exc)
            await send_json(send, 502, jsonrpc_error(-32603, "The MCP server could not be started"))
            return
        status: list[int] = []

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        await self._handle(session, scope, receive, watch)
        if not status or status[0] >= 400:
            await self._close(session)

    def _refused(self, owner: Owner) -> tuple[int, str, str] | None:
        """``(status, message, Retry-After)`` when ``owner`` may not open another session."""
        mine = [s for s in self.sessions.values() if s.owner == owner]
        if len(mine) >= self.max_sessions_per_subject:
            message = "Too many open sessions for this user; close one or retry later"
            return 429, message, self._retry_after(mine)
        if len(self.sessions) >= self.max_sessions:
            return (
                503,
                "Too many open sessions; retry later",
                self._retry_after(self.sessions.values()),
            )
        return None

    def _retry_after(self, sessions: Iterable[BridgeSession]) -> str:
        """Seconds until the first of ``sessions`` could be reaped (at least 1)."""
        now = self._clock()
        waits = [s.last_seen + self.idle_timeout - now for s in sessions if not s.active]
        return str(max(1, math.ceil(min(waits, default=self.idle_timeout))))

    async def reap_idle(self) -> int:
        """Stop every session idle for ``idle_timeout`` seconds; the number stopped."""
        deadline = self._clock() - self.idle_timeout
        idle = [s for s in self.sessions.values() if not s.active and s.last_seen <= deadline]
        for session in idle:
            logger.info("reaping an idle stdio session")
            await self._close(session)
        return len(idle)

    async def _close(self, session: BridgeSession) -> None:
        """Forget the session, end its transport and stop its child (shielded in the SDK)."""
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        if not session.transport.is_terminated:
            await session.transport.terminate()
        session.cancel.cancel()

    def _session_env(self, scope: Scope) -> dict[str, str]:
        env = dict(self.env)
        token = verified_token(scope)
        if token is not None:
            env.update(
                MCPAUTH_SUBJECT=token.subject or "",
                MCPAUTH_CLIENT=token.client_id,
                MCPAUTH_SCOPES=format_scope(token.scopes),
            )
        return env

    async def _run_session(
        self,
        session: BridgeSession,
        env: dict[str, str],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=env)
        try:
            with session.cancel:
                async with (
                    stdio_client(params) as (child_read, child_write),
                    session.transport.connect() as (http_read, http_write),
                ):
                    task_status.started()
                    progress: dict[Any, Any] = {}
                    async with anyio.create_task_group() as pumps:
                        pumps.start_soon(_to_child, http_read, child_write, progress)
                        with suppress(*_CLOSED):
                            await _to_client(child_read, http_write, progress)
                        pumps.cancel_scope.cancel()
        finally:
            if self.sessions.get(session.id) is session:
                del self.sessions[session.id]

    async def _reaper(self) -> None:
        while True:
            await anyio.sleep(self.reap_interval)
            try:
                await self.reap_idle()
            except Exception:  # the reaper must outlive one bad session
                logger.exception("reaping idle stdio sessions failed")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._group = group
                    group.start_soon(self._reaper)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self._group = None
                    for session in list(self.sessions.values()):
                        await self._close(session)
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
