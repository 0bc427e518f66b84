"""Logs, audit events and request ids. Nothing here ever logs a token, code, secret or
password: audit events carry identifiers (client, user, grant, jti) only."""

from __future__ import annotations

import json
import logging
import re
import secrets
import sys
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

audit_log = logging.getLogger("mcpauth.audit")
request_id_var: ContextVar[str] = ContextVar("mcpauth_request_id", default="-")
_VALID_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


# where a request's audit events are also kept (the app's audit trail), set per request
audit_sink: ContextVar[Callable[[str, dict[str, Any]], None] | None] = ContextVar(
    "mcpauth_audit_sink", default=None
)


def audit(event: str, **fields: Any) -> None:
    """Record a security event (login, consent, token issued/refreshed/revoked, replay): a log
    line, and a row of the audit trail when a request of the app emits it."""
    log_audit(event, **fields)
    sink = audit_sink.get()
    if sink is not None:
        sink(event, fields)


def log_audit(event: str, **fields: Any) -> None:
    """The log line of an audit event alone (its caller writes the trail's row itself)."""
    if audit_log.isEnabledFor(logging.INFO):
        audit_log.info(event, extra={"audit": {"event": event, **fields}})


class JSONFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, request id, audit fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": request_id_var.get(),
        }
        fields = getattr(record, "audit", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


_PLAIN = re.compile(r"[A-Za-z0-9._:/@+,\-]+")
# C0 and C1 controls, DEL, and the Unicode line and paragraph separators: each could end a line
_BREAKING = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\\]")


def _escape(text: str) -> str:
    """``text`` with backslashes and every line-breaking or control character escaped."""
    return _BREAKING.sub(lambda m: json.dumps(m.group())[1:-1], text)


def text_value(value: object) -> str:
    """A value as it appears after ``key=``: bare if it is plain, otherwise a JSON string, so
    no value can hold a space, an ``=``, a quote or a line break that forges another field or
    another event."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) else json.dumps(text)


class TextFormatter(logging.Formatter):
    """``level [request id] logger: message key=value ...``, one event per line: the message
    is escaped and every value quoted unless plain (see :func:`text_value`); a traceback follows
    on continuation lines that all start with ``  | ``."""

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname.lower()
        message = _escape(record.getMessage())
        text = f"{level} [{request_id_var.get()}] {record.name}: {message}"
        fields = getattr(record, "audit", None)
        if isinstance(fields, dict):
            text += "".join(
                f" {text_value(k)}={text_value(v)}" for k, v in fields.items() if k != "event"
            )
        if record.exc_info:
            lines = self.formatException(record.exc_info).splitlines()
            text += "".join(f"\n  | {_escape(line)}" for line in lines)
        return text


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send mcpauth's logs (and the audit trail) to stderr as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    logger = logging.getLogger("mcpauth")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


class RequestIdMiddleware:
    """Give every request an id (a sane incoming ``X-Request-ID`` is kept), echo it in the
    response and make it visible to every log line written while serving it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
        text = incoming.decode("latin-1")
        request_id = text if incoming and _VALID_ID.match(text) else secrets.token_hex(8)
        header = (b"x-request-id", request_id.encode())
        token = request_id_var.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)
