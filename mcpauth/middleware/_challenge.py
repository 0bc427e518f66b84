"""``WWW-Authenticate: Bearer`` challenges (RFC 6750 §3, RFC 9728 §5.1, MCP §5 wire formats)."""

from __future__ import annotations

from collections.abc import Iterable

from mcpauth.errors import InsufficientScope, OAuthError
from mcpauth.middleware._asgi import Send, send_json
from mcpauth.oauth import OUTSIDE_ERROR_TEXT

# RFC 6750 §3: error_description and scope exclude '"' and '\'.


def _quoted(value: str) -> str:
    return '"' + OUTSIDE_ERROR_TEXT.sub("", value) + '"'


def scope_string(scopes: Iterable[str]) -> str:
    """Space-separated, de-duplicated, in a stable (sorted) order."""
    return " ".join(sorted(set(scopes)))


def challenge(
    *,
    resource_metadata: str,
    scopes: Iterable[str] = (),
    error: OAuthError | None = None,
) -> str:
    """The header value.

    Missing token: ``Bearer resource_metadata="…", scope="…"``.
    Bad token: ``Bearer error="invalid_token", error_description="…", resource_metadata="…"…``.
    Insufficient scope: ``Bearer error="insufficient_scope", scope="…", resource_metadata="…",
    error_description="…"``.
    """
    scope = scope_string(scopes)
    params: list[tuple[str, str]] = []
    if isinstance(error, InsufficientScope):
        params.append(("error", error.error))
        params.append(("scope", scope))
        params.append(("resource_metadata", resource_metadata))
        if error.description:
            params.append(("error_description", error.description))
    else:
        if error is not None:
            params.append(("error", error.error))
            if error.description:
                params.append(("error_description", error.description))
        params.append(("resource_metadata", resource_metadata))
        if scope:
            params.append(("scope", scope))
    return "Bearer " + ", ".join(f"{name}={_quoted(value)}" for name, value in params)


async def send_error(
    send: Send,
    error: OAuthError | None,
    *,
    resource_metadata: str,
    scopes: Iterable[str] = (),
) -> None:
    """Send 401 (no or bad token), 403 (insufficient scope) or the error's own status.

    A challenge goes out for 401 and 403 only (RFC 6750 §3); other errors (400, 503) carry
    their JSON body alone.
    """
    status = 401 if error is None else error.status_code
    body = {"error": "invalid_token", "error_description": "A bearer access token is required"}
    if error is not None:
        body = error.to_dict()
    headers = list(error.headers.items()) if error is not None else []
    if status in (401, 403):
        value = challenge(resource_metadata=resource_metadata, scopes=scopes, error=error)
        headers.append(("www-authenticate", value))
    await send_json(send, status, body, headers)
