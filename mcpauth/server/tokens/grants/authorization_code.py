"""The authorization_code grant (OAuth 2.1 §4.1.3): one redemption per code, decided by the
database; a replayed code revokes every token of its grant (OAuth 2.1 §4.1.3, docs/security.md
T1); the code is bound to client, redirect URI, PKCE challenge and resource."""

from __future__ import annotations

from mcpauth.errors import InvalidGrant, InvalidRequest, OAuthError
from mcpauth.oauth import same_secret
from mcpauth.server.authorization import checks
from mcpauth.server.authorization.resources import Resources
from mcpauth.server.crypto import digest
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.database import Connection, Record
from mcpauth.server.storage.models import Client
from mcpauth.server.tokens.issuance import (
    Issuance,
    for_person,
    in_one_transaction,
    replayed,
    require_proof,
)
from mcpauth.server.tokens.services import TokenServices


def _check_binding(code: Record, client: Client, form: dict[str, str], jkt: str | None) -> None:
    if code.client_id != client.client_id:
        raise InvalidGrant("The code was issued to another client")
    redirect_uri = form.get("redirect_uri")
    if redirect_uri is None:
        raise InvalidRequest("redirect_uri is required")
    if redirect_uri != code.redirect_uri:
        raise InvalidGrant("redirect_uri differs from the authorization request")
    checks.check_code_verifier(form.get("code_verifier"), code.code_challenge)
    checks.check_same_resource(
        form.get("resource"), code.resource, "resource differs from the authorization request"
    )
    # RFC 9449 §10: a code asked for with dpop_jkt is redeemed only by a proof of that key
    if code.dpop_jkt is not None and (jkt is None or not same_secret(jkt, code.dpop_jkt)):
        raise InvalidGrant("The code was requested for another DPoP key (dpop_jkt)")


def _redeem(
    ctx: TokenServices,
    conn: Connection,
    client: Client,
    form: dict[str, str],
    now: int,
    jkt: str | None,
    resources: Resources,
) -> Issuance | OAuthError:
    code_value = form.get("code")
    if not code_value:
        return InvalidRequest("code is required")
    code = grant_store.code_by_digest(conn, digest(code_value))
    if code is None or code.client_id != client.client_id:
        return InvalidGrant("The authorization code is invalid")
    try:
        require_proof(client, resources.by_uri.get(code.resource), jkt)
    except OAuthError as error:
        return error  # before the code is redeemed: the retry with a proof may use it
    if code.redeemed_at is not None or not grant_store.redeem_code(conn, code.digest, now):
        return replayed(conn, client, code.grant_id, now, kind="authorization_code")
    if code.expires_at <= now:
        return InvalidGrant("The authorization code has expired")
    try:
        _check_binding(code, client, form, jkt)
    except OAuthError as error:
        return error
    grant = grant_store.grant_by_id(conn, code.grant_id)
    if grant is None or grant.revoked_at is not None:
        return InvalidGrant("The grant was revoked")
    return for_person(
        ctx.settings,
        conn,
        client,
        grant,
        code.scope,
        now,
        resource=resources.by_uri.get(grant.resource),
        jkt=jkt,
        auth_time=code.auth_time,
        nonce=code.nonce,
        offline=code.offline,
    )


def exchange(
    ctx: TokenServices, client: Client, form: dict[str, str], *, jkt: str | None = None
) -> Issuance:
    """Redeem an authorization code (``jkt``: the DPoP key the request proved, if any).

    Raises:
        OAuthError: invalid_request, invalid_grant or invalid_target.
    """
    # The code is consumed (and a replay's revocation committed) even when a binding check
    # fails afterwards: a code presented wrongly once is never good again.
    return in_one_transaction(ctx, _redeem, client, form, jkt)
