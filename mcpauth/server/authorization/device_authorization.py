"""The device authorization endpoint (RFC 8628 §3.1, §3.2): a client that cannot open a
browser asks for a device code and a user code; a person types the user code on the
verification page (``browser.verification``) and the device polls the token endpoint
(``tokens.grants.device_code``). The client authenticates as at the token endpoint (a public
client names itself); ``scope`` and ``resource`` are checked as at the authorization endpoint.
Pending requests are capped per client and in all, so nobody grows the table without bound."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.errors import OAuthError, TemporarilyUnavailable, TooManyRequests, UnauthorizedClient
from mcpauth.oauth import DEVICE_CODE, format_scope
from mcpauth.server.authorization import checks
from mcpauth.server.authorization.services import AuthorizationServices, authorization_services
from mcpauth.server.browser.user_codes import display, new_user_code, user_code_digest
from mcpauth.server.clients.authentication import authenticate_request, load_request_client
from mcpauth.server.clients.directory import Loaded
from mcpauth.server.crypto import digest, new_token
from mcpauth.server.http_io import NO_STORE, client_ip, error_response, form_params, json_response
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import device_authorizations as devices
from mcpauth.server.storage.database import Connection
from mcpauth.server.storage.models import Client
from mcpauth.server.threads import run_blocking

VERIFICATION_PATH = "device"
USER_CODE_ATTEMPTS = 5  # a new user code is drawn when one is taken (about 1 in 10^6 each)


def _requested(
    ctx: AuthorizationServices, client: Client, form: dict[str, str]
) -> tuple[str, list[str], bool]:
    """The resource, scopes and offline access of the request, as the authorization endpoint
    decides them (RFC 8707 §2; scopes the server cannot grant are narrowed away).

    Raises:
        UnauthorizedClient: the client is not registered for the device grant.
        InvalidScope, InvalidTarget: as at the authorization endpoint.
    """
    if DEVICE_CODE not in client.grant_types:
        raise UnauthorizedClient(f"The client is not registered for the {DEVICE_CODE} grant")
    requested = checks.parse_scope(form.get("scope"))
    resource = checks.resolve_resource(ctx.resources.current(), form.get("resource"))
    scopes = checks.resolve_scopes(
        requested, resource, client, offline_enabled=ctx.settings.offline_access
    )
    return resource.uri, scopes.granted, scopes.offline


def _check_room(ctx: AuthorizationServices, conn: Connection, client_id: str, now: int) -> None:
    """Refuse a request past the caps on pending device authorizations.

    Raises:
        TooManyRequests: the client has as many as it may.
        TemporarilyUnavailable: the server holds as many as it keeps.
    """
    own, total = devices.outstanding(conn, client_id, now)
    wait = ctx.settings.device_code_ttl
    if own >= ctx.settings.device_max_pending_per_client:
        raise TooManyRequests(
            "This client has too many device authorizations waiting for a person; "
            "finish or abandon some first",
            retry_after=wait,
        )
    if total >= ctx.settings.device_max_pending:
        raise TemporarilyUnavailable(
            "The server has too many device authorizations waiting; try again later",
            headers={"Retry-After": str(wait)},
        )


def _start(
    ctx: AuthorizationServices,
    form: dict[str, str],
    authorization: str | None,
    address: str,
    loaded: Loaded,
) -> dict[str, Any]:
    client = authenticate_request(
        ctx, form, authorization, address, endpoint="device_authorization", loaded=loaded
    )
    resource, scopes, offline = _requested(ctx, client, form)
    now, settings = ctx.now(), ctx.settings
    device_code = new_token()
    with ctx.db.transaction() as conn:
        _check_room(ctx, conn, client.client_id, now)
        for _ in range(USER_CODE_ATTEMPTS):
            user_code = new_user_code()
            added = devices.add(
                conn,
                {
                    "digest": digest(device_code),
                    "user_code_digest": user_code_digest(ctx.cookie_secret, user_code),
                    "client_id": client.client_id,
                    "resource": resource,
                    "scope": format_scope(scopes),
                    "offline": offline,
                    "created_at": now,
                    "expires_at": now + settings.device_code_ttl,
                    "interval": settings.device_poll_interval,
                    "status": devices.PENDING,
                },
            )
            if added:
                break
        else:
            raise TemporarilyUnavailable("No free user code was found; try again")
    audit(
        "device.requested",
        client_id=client.client_id,
        resource=resource,
        scope=format_scope(scopes),
        address=address,
    )
    shown = display(user_code)
    verification_uri = ctx.endpoint_url(VERIFICATION_PATH)
    return {
        "device_code": device_code,
        "user_code": shown,
        "verification_uri": verification_uri,
        # RFC 8628 §3.3.1: the code in the URL; the page still asks the person to confirm it
        "verification_uri_complete": f"{verification_uri}?{urlencode({'user_code': shown})}",
        "expires_in": settings.device_code_ttl,
        "interval": settings.device_poll_interval,
    }


async def device_authorization(request: Request) -> Response:
    """POST /device_authorization"""
    ctx = authorization_services(request)
    try:
        form = await form_params(request, ctx.settings.max_body_bytes)
        authorization, address = request.headers.get("authorization"), client_ip(request)
        loaded = await load_request_client(ctx, form, authorization, address)
        body = await run_blocking(_start, ctx, form, authorization, address, loaded)
    except OAuthError as error:
        return error_response(error)
    return json_response(body, headers=NO_STORE)
