"""The validated authorization request and what ends it: a code, or an error sent back to the
client's (already validated) redirect URI with ``iss`` (RFC 9207) and ``state``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.responses import RedirectResponse, Response

from mcpauth.errors import OAuthError
from mcpauth.oauth import format_scope
from mcpauth.server.browser.display import redirect_view
from mcpauth.server.browser.pages import SECURITY_HEADERS, error_page
from mcpauth.server.browser.services import BrowserServices
from mcpauth.server.crypto import digest, new_id, new_token
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.models import AuthorizationCode, Client, Grant
from mcpauth.uris import parse_url


@dataclass
class AuthorizationRequest:
    client_id: str
    redirect_uri: str
    state: str | None
    code_challenge: str
    resource: str
    scopes: list[str]
    offline: bool
    prompt: str | None
    sid: str  # the browser session that started it; only that browser may finish it
    signed_in_here: bool = False  # the user entered the password during this request
    dpop_jkt: str | None = None  # RFC 9449 §10: the code may only be redeemed with this key
    nonce: str | None = None  # OpenID Connect Core §3.1.2.1: echoed in the ID token
    # RFC 8628: the digest of the device authorization this approves; then there is no
    # redirect URI, state nor PKCE, and the decision ends in browser.verification
    device: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuthorizationRequest:
        return cls(**data)


def is_trusted(client: Client) -> bool:
    """Clients an administrator registered; only to those do errors redirect automatically
    before the user has acted (RFC 9700 §4.11.2; MCP AS-22)."""
    return client.source == "admin" or client.first_party


def redirect_url(redirect_uri: str, params: dict[str, str | None]) -> str:
    query = urlencode({k: v for k, v in params.items() if v is not None})
    separator = "&" if parse_url(redirect_uri).query else "?"
    return f"{redirect_uri}{separator}{query}"


def see_other(url: str) -> Response:
    """303 after every redirect, never 307 (RFC 9700 §4.12)."""
    return RedirectResponse(url, status_code=303, headers=SECURITY_HEADERS)


def error_redirect(
    issuer: str,
    client: Client,
    redirect_uri: str,
    state: str | None,
    error: OAuthError,
    *,
    user_acted: bool = False,
) -> Response:
    """Send ``error`` to the client: a redirect for trusted clients or after the user acted;
    otherwise a page the user leaves by a link (no silent redirect to an untrusted URI)."""
    params = {
        "error": error.error,
        "error_description": error.to_dict().get("error_description"),
        "state": state,
        "iss": issuer,  # RFC 9207 §2: on error responses too
    }
    url = redirect_url(redirect_uri, params)
    if user_acted or is_trusted(client):
        return see_other(url)
    return error_page(
        error.error,
        error.description,
        continue_url=url,
        continue_host=_destination(redirect_uri),
    )


def _destination(redirect_uri: str) -> str:
    """Where the error page's link leads, in words (a custom scheme has no host to name)."""
    view = redirect_view(redirect_uri)
    return view.address or view.label


def issue_code(
    ctx: BrowserServices,
    request: AuthorizationRequest,
    user_id: str,
    auth_time: int,
    interaction_id: str,
    *,
    approved_as: str | None = None,
    amr: str = "",
) -> str:
    """Create the grant and its single authorization code; consume the interaction. When the
    user has just approved (``approved_as`` is the client name the consent page showed), the
    consent is remembered with the request's exact redirect URI. The grant keeps how the
    session signed in (``amr``): its tokens carry it."""
    now = ctx.now()
    code = new_token()
    grant = Grant(
        id=new_id(),
        user_id=user_id,
        client_id=request.client_id,
        resource=request.resource,
        scope=format_scope(request.scopes),
        created_at=now,
        last_used_at=now,
        amr=amr,
    )
    with ctx.db.write() as session:
        grant_store.add_grant_with_code(
            session,
            grant,
            AuthorizationCode(
                digest=digest(code),
                grant_id=grant.id,
                client_id=request.client_id,
                user_id=user_id,
                redirect_uri=request.redirect_uri,
                code_challenge=request.code_challenge,
                resource=request.resource,
                scope=grant.scope,
                offline=request.offline,
                auth_time=auth_time,
                created_at=now,
                expires_at=now + ctx.settings.authorization_code_ttl,
                dpop_jkt=request.dpop_jkt,
                nonce=request.nonce,
            ),
            interaction_id,
        )
        if approved_as is not None:
            scopes = set(request.scopes) | ({"offline_access"} if request.offline else set())
            grant_store.remember_consent(
                session,
                user_id,
                request.client_id,
                request.resource,
                scopes,
                now,
                redirect_uri=request.redirect_uri,
                client_name=approved_as,
            )
    return code


def code_redirect(issuer: str, request: AuthorizationRequest, code: str) -> Response:
    params = {"code": code, "state": request.state, "iss": issuer}
    return see_other(redirect_url(request.redirect_uri, params))
