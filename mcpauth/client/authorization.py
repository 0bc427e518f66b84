"""The authorization request and the checks on its response (OAuth 2.1 §4.1, RFC 9207, MCP)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from mcpauth.client.discovery import check_url
from mcpauth.client.errors import AuthorizationFailed
from mcpauth.client.pkce import PKCE, new_state, require_s256
from mcpauth.oauth import format_scope, same_secret

if TYPE_CHECKING:
    from mcpauth.metadata import AuthorizationServerMetadata

OFFLINE_ACCESS = "offline_access"


@dataclass(frozen=True)
class PendingAuthorization:
    """What the client remembers between redirect and callback (MCP 2026-07-28: the issuer too)."""

    url: str
    state: str
    pkce: PKCE
    redirect_uri: str
    resource: str | None  # None: the server takes no RFC 8707 resource (ServerCompatibility)
    issuer: str
    iss_supported: bool
    scope: str | None

    def __repr__(self) -> str:
        return f"PendingAuthorization(issuer={self.issuer!r}, scope={self.scope!r})"


def select_scope(
    challenged: Iterable[str],
    scopes_supported: Iterable[str] | None,
    *,
    previous: Iterable[str] = (),
    as_scopes: Iterable[str] | None = None,
    offline_access: bool = True,
) -> str | None:
    """The ``scope`` to request (MCP "Scope Selection Strategy", CL-12..CL-14, CL-21).

    The challenge wins, else the PRM ``scopes_supported``, else none; step-up adds the union of
    what was asked before. ``offline_access`` is added only when the AS lists it.
    """
    chosen = list(challenged) or list(scopes_supported or [])
    ordered = list(dict.fromkeys([*previous, *chosen]))
    if not ordered:
        return None  # MCP: omit scope when nothing defines it
    if offline_access and OFFLINE_ACCESS in (as_scopes or []) and OFFLINE_ACCESS not in ordered:
        ordered.append(OFFLINE_ACCESS)
    return format_scope(ordered)


def build_authorization(
    metadata: AuthorizationServerMetadata,
    *,
    issuer: str,
    client_id: str,
    redirect_uri: str,
    resource: str | None,
    scope: str | None,
    pkce_confirmed: bool = False,
) -> PendingAuthorization:
    """The authorization URL and the values to check its response against (``resource`` None
    leaves it out; ``pkce_confirmed`` takes S256 as supported without the metadata saying so).

    Raises:
        PKCENotSupported: the server does not confirm S256.
        UnsafeURL: the authorization endpoint is not http(s) (CL-24).
    """
    if not pkce_confirmed:
        require_s256(metadata)
    endpoint = check_url(metadata.authorization_endpoint or "", "authorization endpoint")
    pkce, state = PKCE.generate(), new_state()
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": pkce.challenge,
        "code_challenge_method": pkce.method,
    }
    if resource is not None:
        params["resource"] = resource  # RFC 8707 §2, MCP: always sent, unless told otherwise
    if scope:
        params["scope"] = scope
    parts = urlsplit(endpoint)
    query = f"{parts.query}&{urlencode(params)}" if parts.query else urlencode(params)
    url = urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
    return PendingAuthorization(
        url=url,
        state=state,
        pkce=pkce,
        redirect_uri=redirect_uri,
        resource=resource,
        issuer=issuer,
        iss_supported=bool(metadata.authorization_response_iss_parameter_supported),
        scope=scope,
    )


def _single(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise AuthorizationFailed(f"the authorization response repeats {name!r}")
    return values[0]


def _check_iss(pending: PendingAuthorization, iss: str | None) -> None:
    # MCP 2026-07-28 / RFC 9207 §2.4: the four-row table; simple string comparison only.
    if iss is None:
        if pending.iss_supported:
            raise AuthorizationFailed(
                "the authorization server advertises iss but the response has none",
                error="missing_iss",
            )
        return
    if iss != pending.issuer:
        raise AuthorizationFailed(
            "the authorization response comes from another issuer (possible mix-up attack)",
            error="issuer_mismatch",
        )


def parse_callback(pending: PendingAuthorization, callback_url: str) -> str:
    """The authorization code from the redirect to ``callback_url``.

    ``state`` is checked first (CL-19), then ``iss`` (CL-17); the server's ``error`` fields are
    reported only after both pass.

    Raises:
        AuthorizationFailed: missing or wrong ``state`` or ``iss``, an error response, or no code.
    """
    params = parse_qs(urlsplit(callback_url).query, keep_blank_values=True)
    state = _single(params, "state")
    if state is None or not same_secret(pending.state, state):
        raise AuthorizationFailed("the authorization response has a missing or wrong state")
    _check_iss(pending, _single(params, "iss"))
    error = _single(params, "error")
    if error is not None:
        description = _single(params, "error_description") or ""
        raise AuthorizationFailed(
            f"authorization failed: {error} {description}".strip(), error=error
        )
    code = _single(params, "code")
    if not code:
        raise AuthorizationFailed("the authorization response has no code")
    return code
