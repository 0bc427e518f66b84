"""RFC 7591 dynamic client registration (MCP: MAY, deprecated in 2026-07-28 but still what
most clients use)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.errors import InvalidClientMetadata, InvalidToken
from mcpauth.oauth import IDENTITY_SCOPES
from mcpauth.server.clients import records
from mcpauth.server.clients.services import ClientServices, client_services
from mcpauth.server.clients.validation import ValidatedClient, validate_client_metadata
from mcpauth.server.config import Settings
from mcpauth.server.crypto import digest, matches
from mcpauth.server.http_io import NO_STORE, json_body, json_response
from mcpauth.server.operations.logs import audit
from mcpauth.server.operations.size_limits import MAX_REGISTRATION_BYTES
from mcpauth.server.storage.lookups import all_scopes
from mcpauth.server.threads import run_blocking


class MetadataTooLarge(InvalidClientMetadata):
    status_code = 413


async def client_metadata_body(request: Request, limit: int) -> Any:
    """An RFC 7591 registration or RFC 7592 update body, at most
    :data:`~mcpauth.server.operations.size_limits.MAX_REGISTRATION_BYTES`
    (413 ``invalid_client_metadata``).

    Raises:
        InvalidClientMetadata: not JSON, or too large (then with status 413).
    """
    return await json_body(
        request,
        min(limit, MAX_REGISTRATION_BYTES),
        InvalidClientMetadata,
        too_large=MetadataTooLarge,
    )


def _check_initial_access_token(settings: Settings, request: Request) -> None:
    expected = settings.initial_access_token
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not expected or scheme.lower() != "bearer" or not matches(token.strip(), digest(expected)):
        raise InvalidToken(
            "Registration requires a valid initial access token",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )


def _register(ctx: ClientServices, raw: object) -> dict[str, object]:
    with ctx.db.read() as session:
        known = set(all_scopes(session)) | set(IDENTITY_SCOPES)  # as scopes_supported lists
    if ctx.settings.offline_access:
        known.add("offline_access")
    validated: ValidatedClient = validate_client_metadata(
        raw, known_scopes=known, auth_methods=records.AUTH_METHODS
    )
    records.check_name_is_free(ctx.db, validated.client_name)
    info = records.create_client(ctx, validated, source="dcr")
    audit(
        "client.registered",
        client_id=info["client_id"],
        source="dcr",
        auth_method=validated.token_endpoint_auth_method,
    )
    return info


async def register(request: Request) -> Response:
    ctx = client_services(request)
    if ctx.settings.registration_policy == "token":
        _check_initial_access_token(ctx.settings, request)
    raw = await client_metadata_body(request, ctx.settings.max_body_bytes)
    info = await run_blocking(_register, ctx, raw)
    return json_response(info, 201, headers=NO_STORE)
