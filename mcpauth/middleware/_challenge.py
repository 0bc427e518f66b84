"""``WWW-Authenticate`` challenges: ``Bearer`` (RFC 6750 §3, RFC 9728 §5.1, MCP §5 wire
formats) and ``DPoP`` (RFC 9449 §7.1, with ``algs``). When DPoP is on, a refusal carries both
challenges (Bearer first, for clients that know only Bearer); the error goes in the DPoP one
when the request used DPoP, when DPoP is required (then there is no Bearer challenge) or when
the refusal is about DPoP itself."""

from __future__ import annotations

from collections.abc import Iterable

from mcpauth.errors import InsufficientScope, OAuthError
from mcpauth.middleware._asgi import Send, send_json
from mcpauth.middleware.sender_constraint import DPoP, NonceNeeded, ProofRefused, SchemeRefused
from mcpauth.oauth import OUTSIDE_ERROR_TEXT, format_scope

# RFC 6750 §3: error_description and scope exclude '"' and '\'.


def _quoted(value: str) -> str:
    return '"' + OUTSIDE_ERROR_TEXT.sub("", value) + '"'


def scope_string(scopes: Iterable[str]) -> str:
    """Space-separated, de-duplicated, in a stable (sorted) order."""
    return format_scope(sorted(set(scopes)))


def challenge(
    *,
    resource_metadata: str,
    scopes: Iterable[str] = (),
    error: OAuthError | None = None,
    scheme: str = "Bearer",
    extra: Iterable[tuple[str, str]] = (),
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
    params.extend(extra)
    return f"{scheme} " + ", ".join(f"{name}={_quoted(value)}" for name, value in params)


def challenges(
    *,
    resource_metadata: str,
    scopes: Iterable[str],
    error: OAuthError | None,
    dpop: DPoP | None,
    used_dpop: bool,
) -> list[str]:
    """The ``WWW-Authenticate`` values of one refusal (see the module docstring)."""
    scopes = list(scopes)
    if dpop is None:
        return [challenge(resource_metadata=resource_metadata, scopes=scopes, error=error)]
    about_dpop = isinstance(error, (SchemeRefused, ProofRefused, NonceNeeded))
    on_dpop = used_dpop or dpop.required or about_dpop
    values = []
    if not dpop.required:
        values.append(
            challenge(
                resource_metadata=resource_metadata,
                scopes=scopes,
                error=None if on_dpop else error,
            )
        )
    values.append(
        challenge(
            resource_metadata=resource_metadata,
            scopes=scopes,
            error=error if on_dpop else None,
            scheme="DPoP",
            extra=dpop.challenge_params(),
        )
    )
    return values


async def send_error(
    send: Send,
    error: OAuthError | None,
    *,
    resource_metadata: str,
    scopes: Iterable[str] = (),
    dpop: DPoP | None = None,
    used_dpop: bool = False,
) -> None:
    """Send 401 (no or bad token), 403 (insufficient scope) or the error's own status.

    A challenge goes out for 401 and 403 only (RFC 6750 §3); other errors (400, 503) carry
    their JSON body alone.
    """
    status = 401 if error is None else error.status_code
    body = {"error": "invalid_token", "error_description": "An access token is required"}
    if error is not None:
        body = error.to_dict()
    headers = list(error.headers.items()) if error is not None else []
    if status in (401, 403):
        for value in challenges(
            resource_metadata=resource_metadata,
            scopes=scopes,
            error=error,
            dpop=dpop,
            used_dpop=used_dpop,
        ):
            headers.append(("www-authenticate", value))
    await send_json(send, status, body, headers)
