"""The token endpoint (OAuth 2.1 §3.2): client authentication, then the grant's own module.
Responses are never cached (RFC 6749 §5.1)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.errors import (
    InvalidRequest,
    OAuthError,
    UnauthorizedClient,
    UnsupportedGrantType,
)
from mcpauth.server import client_auth
from mcpauth.server.context import ServerContext, get_context
from mcpauth.server.grants import authorization_code, client_credentials, jwt_bearer, refresh_token
from mcpauth.server.http import NO_STORE, error_response, form_params, json_response
from mcpauth.server.login import client_ip
from mcpauth.server.observability import audit
from mcpauth.server.threads import run_blocking
from mcpauth.server.tokens import Issuance

GRANTS = {
    "authorization_code": authorization_code.exchange,
    "refresh_token": refresh_token.refresh,
    "client_credentials": client_credentials.issue,
    jwt_bearer.GRANT: jwt_bearer.issue,
}


def _handle(
    ctx: ServerContext, form: dict[str, str], authorization: str | None, address: str
) -> Issuance:
    grant_type = form.get("grant_type")
    if not grant_type:
        raise InvalidRequest("grant_type is required")
    handler = GRANTS.get(grant_type)
    if handler is None:
        raise UnsupportedGrantType(f"grant_type {grant_type!r} is not supported")
    client = client_auth.authenticate_request(ctx, form, authorization, address, endpoint="token")
    if grant_type not in client.grant_types:
        raise UnauthorizedClient(f"The client is not registered for the {grant_type} grant")
    issuance = handler(ctx, client, form)
    claims = issuance.claims
    audit(
        "token.refreshed" if grant_type == "refresh_token" else "token.issued",
        grant_type=grant_type,
        client_id=client.client_id,
        sub=claims["sub"],
        aud=claims["aud"],
        jti=claims["jti"],
        refresh_token=issuance.refresh_token is not None,
    )
    return issuance


def _respond(
    ctx: ServerContext, form: dict[str, str], authorization: str | None, address: str
) -> dict[str, Any]:
    """The whole token request in one worker thread: database, signing and JSON body."""
    return _handle(ctx, form, authorization, address).response(ctx)


def _in_memory(
    ctx: ServerContext, form: dict[str, str], authorization: str | None, address: str
) -> bool:
    """A client_credentials request whose client, lockout state and resources are all cached
    does no I/O: it is answered on the event loop, saving the worker-thread hop."""
    if form.get("grant_type") != client_credentials.GRANT:
        return False
    if not (ctx.resources.is_cached() and ctx.keys.is_fresh()):
        return False
    try:
        credentials = client_auth.presented_credentials(authorization, form)
    except OAuthError:
        return False
    return client_auth.answerable_from_memory(ctx, credentials, address)


async def token(request: Request) -> Response:
    ctx = get_context(request)
    try:
        form = await form_params(request, ctx.settings.max_body_bytes)
        authorization, address = request.headers.get("authorization"), client_ip(request)
        if _in_memory(ctx, form, authorization, address):
            body = _respond(ctx, form, authorization, address)
        else:
            body = await run_blocking(_respond, ctx, form, authorization, address)
    except OAuthError as error:
        return error_response(error)
    return json_response(body, headers=NO_STORE)
