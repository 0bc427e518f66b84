"""JWT assertions presented to the token endpoint: RFC 7523 §2.2 client authentication
(``private_key_jwt``) with single-use ``jti``s recorded in the database, so a replay is refused
by every replica."""

from __future__ import annotations

from typing import Any

from mcpauth import jwt
from mcpauth.errors import InvalidClient, InvalidToken, OAuthError
from mcpauth.server.clients.directory import ClientDirectory, Loaded
from mcpauth.server.clients.services import ClientServices
from mcpauth.server.config import Settings
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage.defences import record_jti
from mcpauth.server.storage.models import Client

MAX_LIFETIME = 300  # seconds an assertion may still be valid for when presented
SIGNING_ALGS = (
    "ES256",
    "ES384",
    "ES512",
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "EdDSA",
)


def unverified_kid(assertion: str) -> str | None:
    """The ``kid`` an assertion names, to know which key to have loaded; for lookup only."""
    try:
        kid = jwt.unverified_header(assertion).get("kid")
    except InvalidToken:
        return None
    return kid if isinstance(kid, str) else None


def unverified_subject(assertion: str) -> str | None:
    """The ``iss`` of an assertion (= the client_id, RFC 7523 §3), for lookup only."""
    try:
        claims = jwt.unverified_claims(assertion)
    except InvalidToken:
        return None
    issuer = claims.get("iss") if isinstance(claims, dict) else None
    return issuer if isinstance(issuer, str) and issuer else None


def audiences(settings: Settings, endpoint: str) -> set[str]:
    """What ``aud`` may name: the issuer (with or without a trailing slash), the token
    endpoint, or the endpoint being called (RFC 7523 §3)."""
    issuer = settings.issuer
    return {
        issuer,
        issuer.rstrip("/"),
        issuer.rstrip("/") + "/",
        settings.endpoint_url("token"),
        settings.endpoint_url(endpoint),
    }


def _keys(
    clients: ClientDirectory, client: Client, loaded: Loaded
) -> dict[str, jwt.VerificationKey]:
    keys = clients.jwks_for(client, loaded)
    if not keys:
        raise InvalidClient("The client has no usable public keys")
    return keys


def verify_client_assertion(
    ctx: ClientServices, client: Client, assertion: str, endpoint: str, loaded: Loaded
) -> dict[str, Any]:
    """Check a ``private_key_jwt`` assertion with the client's keys (inline, or ``loaded``
    from its ``jwks_uri`` before the worker thread started) and consume its ``jti``.

    Raises:
        InvalidClient: bad signature, claims, lifetime, or a replayed ``jti``.
    """
    try:
        claims = jwt.verify(
            assertion,
            _keys(ctx.clients, client, loaded),
            issuer=client.client_id,
            audience=None,
            typ=None,
            required=("iss", "sub", "aud", "exp", "jti"),
            leeway=30,
        )
    except OAuthError as exc:
        raise InvalidClient(f"Client assertion rejected: {exc.description}") from exc
    if claims["sub"] != client.client_id:
        raise InvalidClient("Client assertion sub must equal the client_id (RFC 7523 §3)")
    aud = claims["aud"]
    # RFC 7519 §4.1.3: a string or an array of strings; anything else names nobody
    listed = aud if isinstance(aud, list) else [aud]
    named = {value for value in listed if isinstance(value, str)}
    if not named & audiences(ctx.settings, endpoint):
        raise InvalidClient("Client assertion aud must name this authorization server")
    now = ctx.now()
    if int(claims["exp"]) > now + MAX_LIFETIME:
        raise InvalidClient(f"Client assertion must expire within {MAX_LIFETIME} seconds")
    with ctx.db.write() as session:
        fresh = record_jti(session, client.client_id, str(claims["jti"]), int(claims["exp"]), now)
    if not fresh:
        audit("replay.detected", kind="client_assertion", client_id=client.client_id)
        raise InvalidClient("Client assertion jti was already used")
    return claims
