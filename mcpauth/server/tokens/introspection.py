"""RFC 7662 token introspection for authenticated resource servers (clients registered with
``--introspect``). Revoked, expired, foreign and garbage tokens are ``active: false``."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mcpauth import jwt
from mcpauth.errors import InvalidRequest, OAuthError, UnauthorizedClient
from mcpauth.server.clients.authentication import authenticated_answer
from mcpauth.server.crypto import digest
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.models import Client
from mcpauth.server.tokens.issuance import PERSON_CLAIMS
from mcpauth.server.tokens.services import TokenServices, token_services

INACTIVE: dict[str, Any] = {"active": False}


def access_token_claims(ctx: TokenServices, token: str) -> dict[str, Any] | None:
    """The claims of an access token this server issued and has not revoked, else None."""
    try:
        claims = jwt.verify(
            token, jwt.key_set(ctx.keys.jwks()), issuer=ctx.settings.issuer, audience=None, leeway=0
        )
    except OAuthError:
        return None
    grant_id = claims.get("gid")
    with ctx.db.read() as session:
        if grant_store.access_token_revoked(
            session, claims["jti"], grant_id if isinstance(grant_id, str) else None
        ):
            return None
    return claims


def _refresh_token(ctx: TokenServices, token: str) -> dict[str, Any] | None:
    now = ctx.now()
    with ctx.db.read() as session:
        found = grant_store.live_refresh_token(session, digest(token), now)
    if found is None:
        return None
    row, grant = found
    bound = {"cnf": {"jkt": row.dpop_jkt}} if row.dpop_jkt else {}
    return {
        **bound,
        "active": True,
        "token_type": "refresh_token",
        "scope": row.scope,
        "client_id": row.client_id,
        "sub": grant.user_id,
        "aud": row.resource,
        "iss": ctx.settings.issuer,
        "exp": row.expires_at,
        "iat": row.created_at,
    }


def introspection(ctx: TokenServices, token: str, hint: str | None) -> dict[str, Any]:
    if hint != "refresh_token" and token.count(".") == 2:
        claims = access_token_claims(ctx, token)
        if claims is not None:
            keep = (
                *("scope", "client_id", "sub", "aud", "iss", "exp", "iat", "jti", "nbf", "cnf"),
                *PERSON_CLAIMS,  # those the token's resource asked for (issuance.person_claims)
            )
            return {
                "active": True,
                # RFC 9449 §6.2: a bound token says so, with the key in cnf.jkt
                "token_type": "DPoP" if "cnf" in claims else "Bearer",
                **{k: claims[k] for k in keep if k in claims},
            }
        return INACTIVE
    return _refresh_token(ctx, token) or INACTIVE


def _introspect(ctx: TokenServices, client: Client, form: dict[str, str]) -> dict[str, Any]:
    if not client.introspect:
        raise UnauthorizedClient("This client may not introspect tokens")
    token = form.get("token")
    if not token:
        raise InvalidRequest("token is required")
    return introspection(ctx, token, form.get("token_type_hint"))


async def introspect(request: Request) -> Response:
    return await authenticated_answer(token_services(request), request, "introspect", _introspect)
