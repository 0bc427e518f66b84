"""Plain request and response values that the sans-I/O flow yields and receives.

The adapters in :mod:`mcpauth.client.auth` turn them into ``httpx`` or ``httpx2`` objects, so the
flow itself never touches a socket and tests can step it by hand.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

MCP_PROTOCOL_VERSION = "2025-11-25"
_JSON = "application/json"


@dataclass(frozen=True)
class HTTPRequest:
    """An HTTP request the flow wants sent."""

    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def form(self) -> dict[str, str]:
        """The form-encoded body as a dict (for tests and logging without secrets)."""
        from urllib.parse import parse_qsl

        return dict(parse_qsl(self.body.decode(), keep_blank_values=True))


@dataclass(frozen=True)
class HTTPResponse:
    """What came back: status, headers (names lowercase) and the body when it was read."""

    status_code: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    challenges: tuple[str, ...] = ()  # every WWW-Authenticate value, in order

    def json(self) -> Any:
        """The body parsed as JSON.

        Raises:
            ValueError: the body is not JSON.
        """
        return json.loads(self.body or b"null")

    def json_object(self) -> dict[str, Any] | None:
        """The body as a JSON object, or ``None`` when it is anything else."""
        try:
            value = self.json()
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


def get(url: str, *, protocol_version: str | None = MCP_PROTOCOL_VERSION) -> HTTPRequest:
    headers = {"accept": _JSON}
    if protocol_version:
        headers["mcp-protocol-version"] = protocol_version
    return HTTPRequest("GET", url, headers)


def post_form(
    url: str, data: Mapping[str, str], headers: Mapping[str, str] | None = None
) -> HTTPRequest:
    all_headers = {"content-type": "application/x-www-form-urlencoded", "accept": _JSON}
    all_headers.update(headers or {})
    return HTTPRequest("POST", url, all_headers, urlencode(data).encode())


def post_json(url: str, document: Mapping[str, Any]) -> HTTPRequest:
    headers = {"content-type": _JSON, "accept": _JSON}
    return HTTPRequest("POST", url, headers, json.dumps(document).encode())
