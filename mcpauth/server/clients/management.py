"""RFC 7592 client configuration endpoint: read, update and delete a dynamically registered
client with its registration access token. Each read or update rotates that token (RFC 7592
§3: the client must use the one in the newest response)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.errors import InvalidClientMetadata, InvalidToken, OAuthError
from mcpauth.oauth import IDENTITY_SCOPES
from mcpauth.server.clients import records
from mcpauth.server.clients.registration import client_metadata_body
from mcpauth.server.clients.services import ClientServices, client_services
from mcpauth.server.clients.validation import validate_client_metadata
from mcpauth.server.crypto import digest, matches, new_token
from mcpauth.server.http_io import NO_STORE, error_response, json_response
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.lookups import all_scopes, get_client, save_client
from mcpauth.server.storage.models import Client
from mcpauth.server.storage.prune import client_expires_at
from mcpauth.server.threads import run_blocking

UNAUTHORIZED = InvalidToken(
    "The registration access token is missing or invalid",
    headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
)


def _bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UNAUTHORIZED
    return token.strip()


def _load(db: Database, client_id: str, token: str) -> Client:
    with db.read() as session:
        client = get_client(session, client_id)
    # one answer for unknown clients and wrong tokens (nothing about which clients exist)
    if client is None or not matches(token, client.registration_token_digest):
        raise UNAUTHORIZED
    return client


def _information(ctx: ClientServices, client: Client, token: str) -> dict[str, Any]:
    info: dict[str, Any] = {"client_id": client.client_id, "client_id_issued_at": client.created_at}
    if client.secret_digest is not None:
        # not 0 ("never") for a client the pruner will delete when unused (docs/security.md T33)
        with ctx.db.read() as session:
            expires_at = client_expires_at(session, ctx.settings, client)
        info["client_secret_expires_at"] = expires_at
    info.update(client.client_metadata)
    info["registration_access_token"] = token
    info["registration_client_uri"] = records.configuration_uri(ctx.settings, client.client_id)
    return info


def _rotate_token(db: Database, client: Client) -> str:
    token = new_token()
    with db.write() as session:
        row = get_client(session, client.client_id)
        if row is None:
            raise UNAUTHORIZED
        row.registration_token_digest = digest(token)
        save_client(session, row)
    return token


def _read(ctx: ClientServices, client_id: str, token: str) -> dict[str, Any]:
    client = _load(ctx.db, client_id, token)
    return _information(ctx, client, _rotate_token(ctx.db, client))


def _update(ctx: ClientServices, client_id: str, token: str, raw: object) -> dict[str, Any]:
    client = _load(ctx.db, client_id, token)
    if not isinstance(raw, dict) or raw.get("client_id") != client_id:
        raise InvalidClientMetadata("client_id in the body must equal the client being updated")
    if "client_secret" in raw and not matches(str(raw["client_secret"]), client.secret_digest):
        raise InvalidClientMetadata("client_secret does not match")
    with ctx.db.read() as session:
        known = (
            set(all_scopes(session))
            | set(IDENTITY_SCOPES)
            | ({"offline_access"} if ctx.settings.offline_access else set())
        )
    validated = validate_client_metadata(raw, known_scopes=known, auth_methods=records.AUTH_METHODS)
    if validated.token_endpoint_auth_method != client.token_endpoint_auth_method:
        raise InvalidClientMetadata("token_endpoint_auth_method cannot be changed; register anew")
    records.check_name_is_free(ctx.db, validated.client_name, client_id=client_id)
    new = new_token()
    with ctx.db.write() as session:
        row = get_client(session, client_id)
        if row is None:
            raise UNAUTHORIZED
        records.apply_metadata(row, validated)
        row.registration_token_digest = digest(new)
        save_client(session, row)
    ctx.clients.forget(client_id)
    return _information(ctx, row, new)


def _delete(ctx: ClientServices, client_id: str, token: str) -> None:
    _load(ctx.db, client_id, token)
    with ctx.db.write() as session:
        grant_store.delete_client(session, client_id)
    ctx.clients.forget(client_id)


async def configure(request: Request) -> Response:
    ctx = client_services(request)
    client_id = request.path_params["client_id"]
    try:
        token = _bearer(request)
        if request.method == "GET":
            body = await run_blocking(_read, ctx, client_id, token)
        elif request.method == "PUT":
            raw = await client_metadata_body(request, ctx.settings.max_body_bytes)
            body = await run_blocking(_update, ctx, client_id, token, raw)
        else:
            await run_blocking(_delete, ctx, client_id, token)
            return Response(status_code=204, headers=NO_STORE)
    except OAuthError as error:
        return error_response(error)
    return json_response(body, headers=NO_STORE)
