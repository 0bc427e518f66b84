"""RFC 7009 token revocation. A refresh token revokes its whole grant; an access token's
``jti`` is deny-listed (introspection consults it) until the token expires. Tokens that are
unknown or belong to another client are answered 200 all the same (RFC 7009 §2.2)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mcpauth import jwt
from mcpauth.errors import InvalidRequest, OAuthError
from mcpauth.server.clients.authentication import authenticated_answer
from mcpauth.server.crypto import digest
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.models import Client
from mcpauth.server.tokens.services import TokenServices, token_services


def _revoke_refresh_token(db: Database, now: int, client: Client, token: str) -> bool:
    with db.write() as session:
        row = grant_store.get_refresh_token(session, digest(token))
        if row is None:
            return False
        if row.client_id == client.client_id:
            grant_store.revoke_grant(session, row.grant_id, now)
    return True


def _revoke_access_token(ctx: TokenServices, client: Client, token: str) -> None:
    try:
        claims = jwt.verify(
            token, jwt.key_set(ctx.keys.jwks()), issuer=ctx.settings.issuer, audience=None, leeway=0
        )
    except OAuthError:
        return  # expired or not ours: nothing left to revoke
    if claims.get("client_id") != client.client_id:
        return
    with ctx.db.write() as session:
        grant_store.revoke_access_token(session, claims["jti"], int(claims["exp"]))


def _revoke(ctx: TokenServices, client: Client, form: dict[str, str]) -> dict[str, Any]:
    token = form.get("token")
    if not token:
        raise InvalidRequest("token is required")
    hint = form.get("token_type_hint")
    audit("token.revoked", client_id=client.client_id, hint=hint)
    if hint != "access_token" and _revoke_refresh_token(ctx.db, ctx.now(), client, token):
        return {}
    if token.count(".") == 2:
        _revoke_access_token(ctx, client, token)
    return {}


async def revoke(request: Request) -> Response:
    return await authenticated_answer(token_services(request), request, "revoke", _revoke)
