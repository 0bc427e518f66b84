"""The refresh_token grant (OAuth 2.1 §4.3): every use rotates the token; presenting a rotated
token revokes the whole family (OAuth 2.1 §4.3.1, RFC 9700 §4.14.2; docs/security.md T13);
scopes may narrow, never widen; the resource stays the grant's."""

from __future__ import annotations

from hmac import compare_digest
from typing import Any

from mcpauth.errors import InvalidDPoPProof, InvalidGrant, InvalidRequest, OAuthError
from mcpauth.server.authorization import checks
from mcpauth.server.authorization.resources import Resources
from mcpauth.server.context import ServerContext
from mcpauth.server.crypto import digest
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.database import Connection, Row
from mcpauth.server.storage.models import Client, Resource
from mcpauth.server.tokens.issuance import (
    Issuance,
    add_refresh_token,
    for_grant,
    person_claims,
    require_proof,
)


def _requested(form: dict[str, str], token: Row[Any], resource: Resource | None) -> list[str]:
    requested = checks.parse_scope(form.get("scope"))
    scopes = checks.narrower_scopes(requested, token.scope.split(), resource)
    checks.check_same_resource(
        form.get("resource"), token.resource, "resource is outside the original grant"
    )
    return scopes


def _reused(conn: Connection, client: Client, grant_id: str, now: int) -> OAuthError:
    """A rotated token came back (OAuth 2.1 §4.3.1): the whole grant is revoked."""
    grant_store.revoke_grant(conn, grant_id, now)
    audit("replay.detected", kind="refresh_token", client_id=client.client_id, grant_id=grant_id)
    return InvalidGrant("The refresh token was already used; its grant is revoked")


def _rotate(
    ctx: ServerContext,
    conn: Connection,
    client: Client,
    form: dict[str, str],
    now: int,
    jkt: str | None,
    resources: Resources,
) -> Issuance | OAuthError:
    value = form.get("refresh_token")
    if not value:
        return InvalidRequest("refresh_token is required")
    token = grant_store.refresh_token_by_digest(conn, digest(value))
    if token is None or token.client_id != client.client_id:
        return InvalidGrant("The refresh token is invalid")
    grant = grant_store.grant_by_id(conn, token.grant_id)
    if grant is None or grant.revoked_at is not None:
        return InvalidGrant("The grant was revoked")
    if token.rotated_at is not None:
        return _reused(conn, client, grant.id, now)
    if token.expires_at <= now:
        return InvalidGrant("The refresh token has expired")
    # Validate the whole request before rotating: a refused refresh (a wider scope, another
    # resource) leaves the token usable, so the client's corrected retry is not taken for reuse.
    if token.dpop_jkt is not None and (jkt is None or not compare_digest(jkt, token.dpop_jkt)):
        return InvalidDPoPProof(
            "The refresh token is bound to a DPoP key: present a proof signed with that key"
        )
    try:
        scopes = _requested(form, token, resources.by_uri.get(token.resource))
        require_proof(client, resources.by_uri.get(token.resource), jkt)
    except OAuthError as error:
        return error
    if not grant_store.rotate_refresh_token(conn, token.digest, now):
        return _reused(conn, client, grant.id, now)  # a concurrent use rotated it first
    person = person_claims(conn, resources.by_uri.get(grant.resource), grant.user_id)
    issuance = for_grant(ctx.settings, grant, scopes, now, person)
    if jkt is not None:
        issuance.bind(jkt)
    # RFC 6749 §6: the new refresh token keeps the original scope (and its DPoP key)
    issuance.refresh_token = add_refresh_token(
        ctx.settings, conn, grant, scope=token.scope, now=now, dpop_jkt=token.dpop_jkt
    )
    return issuance


def refresh(
    ctx: ServerContext, client: Client, form: dict[str, str], *, jkt: str | None = None
) -> Issuance:
    """Exchange a refresh token for new tokens (``jkt``: the DPoP key the request proved).

    Raises:
        OAuthError: invalid_request, invalid_grant, invalid_scope or invalid_target.
    """
    now = ctx.now()
    resources = ctx.resources.current()
    with ctx.db.transaction() as conn:
        outcome = _rotate(ctx, conn, client, form, now, jkt, resources)
    if isinstance(outcome, OAuthError):
        raise outcome
    return outcome
