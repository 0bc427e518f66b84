"""RFC 8414 authorization server metadata, also served as OpenID Connect discovery; the
``issuer`` is the configured one byte for byte (RFC 8414 §3.3, MCP AS-03)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mcpauth import dpop
from mcpauth.errors import MCPAuthError
from mcpauth.metadata import AuthorizationServerMetadata
from mcpauth.oauth import DEVICE_CODE, IDENTITY_SCOPES, TOKEN_EXCHANGE
from mcpauth.server.clients.assertions import SIGNING_ALGS
from mcpauth.server.clients.records import AUTH_METHODS
from mcpauth.server.config import Settings
from mcpauth.server.context import ServerContext, get_context
from mcpauth.server.http_io import json_response
from mcpauth.server.storage import migrate
from mcpauth.server.storage.database import Database, DatabaseError
from mcpauth.server.storage.lookups import all_scopes
from mcpauth.server.threads import run_blocking
from mcpauth.server.tokens.grants.jwt_bearer import GRANT as JWT_BEARER
from mcpauth.server.tokens.openid import CLAIMS_SUPPORTED, PERSON_CLAIMS_SUPPORTED

GRANT_TYPES = ["authorization_code", "refresh_token", "client_credentials", TOKEN_EXCHANGE]


def build_metadata(settings: Settings, scopes: list[str]) -> dict[str, Any]:
    """The metadata document; complete for OpenID Connect Discovery 1.0 §3 too (``openid`` is
    answered with an ID token and UserInfo)."""
    own = {*IDENTITY_SCOPES, *(["offline_access"] if settings.offline_access else [])}
    scopes = sorted({*scopes, *own})
    document = AuthorizationServerMetadata(
        issuer=settings.issuer,
        authorization_endpoint=settings.endpoint_url("authorize"),
        token_endpoint=settings.endpoint_url("token"),
        jwks_uri=settings.endpoint_url("jwks.json"),
        registration_endpoint=(
            settings.endpoint_url("register") if settings.registration_policy != "closed" else None
        ),
        scopes_supported=scopes,
        response_types_supported=["code"],
        response_modes_supported=["query"],
        grant_types_supported=GRANT_TYPES
        + ([DEVICE_CODE] if settings.device_flow else [])
        + ([JWT_BEARER] if settings.trusted_idps or settings.workloads else []),
        token_endpoint_auth_methods_supported=list(AUTH_METHODS),
        token_endpoint_auth_signing_alg_values_supported=list(SIGNING_ALGS),
        revocation_endpoint=settings.endpoint_url("revoke"),
        revocation_endpoint_auth_methods_supported=list(AUTH_METHODS),
        introspection_endpoint=settings.endpoint_url("introspect"),
        introspection_endpoint_auth_methods_supported=[m for m in AUTH_METHODS if m != "none"],
        code_challenge_methods_supported=["S256"],
        authorization_response_iss_parameter_supported=True,
        client_id_metadata_document_supported=settings.cimd_enabled,
        device_authorization_endpoint=(  # RFC 8628 §4
            settings.endpoint_url("device_authorization") if settings.device_flow else None
        ),
        userinfo_endpoint=settings.endpoint_url("userinfo"),
        subject_types_supported=["public"],
        id_token_signing_alg_values_supported=[settings.signing_alg],
        claims_supported=[*CLAIMS_SUPPORTED, *PERSON_CLAIMS_SUPPORTED],
        dpop_signing_alg_values_supported=list(dpop.ALGORITHMS),
    )
    return document.to_json()


def _load_scopes(db: Database) -> list[str]:
    with db.read() as session:
        return all_scopes(session)


async def metadata(request: Request) -> Response:
    ctx = get_context(request)
    scopes = await run_blocking(_load_scopes, ctx.db)
    return json_response(
        build_metadata(ctx.settings, scopes), headers={"Cache-Control": "max-age=300"}
    )


async def jwks(request: Request) -> Response:
    ctx = get_context(request)
    document = await run_blocking(ctx.keys.jwks)
    return json_response(document, headers={"Cache-Control": "max-age=300"})


async def health(request: Request) -> Response:
    """Liveness: the process answers."""
    return json_response({"status": "ok"}, headers={"Cache-Control": "no-store"})


def _readiness(ctx: ServerContext) -> str | None:
    try:
        if not migrate.is_current(ctx.db.engine):
            return "the database schema is not at the newest revision"
        ctx.keys.signer()
    except (DatabaseError, MCPAuthError) as exc:
        return f"{type(exc).__name__}: not ready"
    return None


async def ready(request: Request) -> Response:
    """Readiness: the database answers, its schema is current, a signing key is loaded."""
    problem = await run_blocking(_readiness, get_context(request))
    if problem is not None:
        return json_response(
            {"status": "unavailable", "reason": problem}, 503, headers={"Cache-Control": "no-store"}
        )
    return json_response({"status": "ready"}, headers={"Cache-Control": "no-store"})
