"""The refresh_token grant (OAuth 2.1 §4.3): every use rotates the token; presenting a rotated
token revokes the whole family (OAuth 2.1 §4.3.1, RFC 9700 §4.14.2; docs/security.md T13),
except the same client (and DPoP key) presenting it again within `refresh_token_reuse_grace`
of its rotation, which gets a new pair from the same grant; scopes may narrow, never widen; the
resource stays the grant's. A grant made with one factor refreshes no longer once its resource
(or the server) requires two (docs/security.md T49)."""

from __future__ import annotations

from mcpauth.errors import InvalidDPoPProof, InvalidGrant, InvalidRequest, OAuthError
from mcpauth.oauth import parse_scope, same_secret
from mcpauth.server.authorization import checks
from mcpauth.server.authorization.resources import Resources
from mcpauth.server.crypto import digest
from mcpauth.server.identity import methods
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.database import Connection, Record
from mcpauth.server.storage.models import Client, Resource
from mcpauth.server.tokens.issuance import (
    Issuance,
    add_refresh_token,
    for_grant,
    in_one_transaction,
    replayed,
    require_proof,
)
from mcpauth.server.tokens.services import TokenServices


def _requested(form: dict[str, str], token: Record, resource: Resource | None) -> list[str]:
    requested = checks.parse_scope(form.get("scope"))
    scopes = checks.narrower_scopes(requested, parse_scope(token.scope), resource)
    checks.check_same_resource(
        form.get("resource"), token.resource, "resource is outside the original grant"
    )
    return scopes


def _reused(conn: Connection, client: Client, grant_id: str, now: int) -> OAuthError:
    """A rotated token came back past its grace (OAuth 2.1 §4.3.1): the whole grant is revoked."""
    return replayed(conn, client, grant_id, now, kind="refresh_token")


def _replayed(conn: Connection, client: Client, token: Record, now: int, grace: int) -> bool:
    """Whether the rotated ``token`` is back within the grace (parallel refreshes, a retry after
    a lost response): it is then used once more, and nothing is revoked."""
    if not grant_store.replay_refresh_token(conn, token.digest, token.grant_id, now, grace):
        return False
    audit(
        "replay.within_grace",
        kind="refresh_token",
        client_id=client.client_id,
        grant_id=token.grant_id,
    )
    return True


def _presented(
    conn: Connection, client: Client, form: dict[str, str]
) -> tuple[Record, Record] | OAuthError:
    """The client's refresh token named by the form, with its grant, which lives."""
    value = form.get("refresh_token")
    if not value:
        return InvalidRequest("refresh_token is required")
    token = grant_store.refresh_token_by_digest(conn, digest(value))
    if token is None or token.client_id != client.client_id:
        return InvalidGrant("The refresh token is invalid")
    grant = grant_store.grant_by_id(conn, token.grant_id)
    if grant is None or grant.revoked_at is not None:
        return InvalidGrant("The grant was revoked")  # and the grace never revives it
    return token, grant


def _rotate(
    ctx: TokenServices,
    conn: Connection,
    client: Client,
    form: dict[str, str],
    now: int,
    jkt: str | None,
    resources: Resources,
) -> Issuance | OAuthError:
    presented = _presented(conn, client, form)
    if isinstance(presented, OAuthError):
        return presented
    token, grant = presented
    grace = ctx.settings.refresh_token_reuse_grace
    replay = token.rotated_at is not None
    # RFC 9700 §4.14.2: a rotated token presented again past the grace is taken for theft
    if replay and not _replayed(conn, client, token, now, grace):
        return _reused(conn, client, grant.id, now)
    if token.expires_at <= now:
        return InvalidGrant("The refresh token has expired")
    # Validate the whole request before rotating: a refused refresh (a wider scope, another
    # resource) leaves the token usable, so the client's corrected retry is not taken for reuse.
    if token.dpop_jkt is not None and (jkt is None or not same_secret(jkt, token.dpop_jkt)):
        if replay:  # RFC 9449 §5: only the key's holder is the same caller
            return _reused(conn, client, grant.id, now)
        return InvalidDPoPProof(
            "The refresh token is bound to a DPoP key: present a proof signed with that key"
        )
    resource = resources.by_uri.get(grant.resource)
    # docs/security.md T49: the resource (or the server) came to require two factors after a
    # one-factor sign-in made this grant; the person signs in again to reach it
    if methods.required(ctx.settings, resource) and not methods.has_two_factors(grant.amr):
        return InvalidGrant("The resource now requires a second factor: sign in again")
    try:
        scopes = _requested(form, token, resources.by_uri.get(token.resource))
        require_proof(client, resources.by_uri.get(token.resource), jkt)
    except OAuthError as error:
        return error
    rotated = replay or grant_store.rotate_refresh_token(conn, token.digest, now)
    # lost to a concurrent use that rotated it first: this request is then its replay
    if not rotated and not _replayed(conn, client, token, now, grace):
        return _reused(conn, client, grant.id, now)
    issuance = for_grant(ctx.settings, conn, grant, scopes, now, resource=resource, jkt=jkt)
    # RFC 6749 §6: the new refresh token keeps the original scope (and its DPoP key)
    issuance.refresh_token = add_refresh_token(
        ctx.settings, conn, grant, scope=token.scope, now=now, dpop_jkt=token.dpop_jkt
    )
    return issuance


def refresh(
    ctx: TokenServices, client: Client, form: dict[str, str], *, jkt: str | None = None
) -> Issuance:
    """Exchange a refresh token for new tokens (``jkt``: the DPoP key the request proved).

    Raises:
        OAuthError: invalid_request, invalid_grant, invalid_scope or invalid_target.
    """
    # a refusal still commits what it wrote: a reused token's grant stays revoked
    return in_one_transaction(ctx, _rotate, client, form, jkt)
