"""The device_code grant (RFC 8628 §3.4, §3.5): a device polls with its device code until the
person approved or denied its request on the verification page. Polling faster than the
interval answers ``slow_down`` and adds 5 seconds to it; an approved code is redeemed once,
decided by the database, and a redeemed code presented again revokes its grant, as a replayed
authorization code does (docs/security.md T45)."""

from __future__ import annotations

from typing import Any

from mcpauth.errors import (
    AccessDenied,
    AuthorizationPending,
    ExpiredToken,
    InvalidGrant,
    InvalidRequest,
    OAuthError,
    SlowDown,
    UnsupportedGrantType,
)
from mcpauth.oauth import DEVICE_CODE
from mcpauth.server.authorization import checks
from mcpauth.server.authorization.resources import Resources
from mcpauth.server.crypto import digest
from mcpauth.server.storage import device_authorizations as devices
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.database import Connection, Row
from mcpauth.server.storage.models import Client
from mcpauth.server.tokens.issuance import (
    Issuance,
    for_person,
    in_one_transaction,
    replayed,
    require_proof,
)
from mcpauth.server.tokens.services import TokenServices

GRANT = DEVICE_CODE
SLOW_DOWN_SECONDS = 5  # RFC 8628 §3.5: added to the interval by each slow_down


def _undecided(conn: Connection, row: Row[Any], now: int) -> OAuthError:
    """What a poll of a live code the person has not approved is told."""
    if row.status == devices.DENIED:
        return AccessDenied("The person denied the request")
    if not devices.poll(conn, row.digest, now, SLOW_DOWN_SECONDS):
        return SlowDown(
            f"Polling too fast: wait {row.interval + SLOW_DOWN_SECONDS} seconds between requests"
        )
    return AuthorizationPending("The person has not approved the request yet")


def _issue(
    ctx: TokenServices,
    conn: Connection,
    client: Client,
    row: Row[Any],
    now: int,
    jkt: str | None,
    resources: Resources,
) -> Issuance | OAuthError:
    """The tokens of the approved request ``row``, redeemed now."""
    if not devices.redeem(conn, row.digest, now):
        return _replayed(conn, client, row, now)
    grant = grant_store.grant_by_id(conn, row.grant_id or "")
    if grant is None or grant.revoked_at is not None:
        return InvalidGrant("The grant was revoked")
    return for_person(
        ctx.settings,
        conn,
        client,
        grant,
        row.scope,
        now,
        resource=resources.by_uri.get(grant.resource),
        jkt=jkt,
        auth_time=row.auth_time or now,
        nonce=None,
        offline=bool(row.offline),
    )


def _replayed(conn: Connection, client: Client, row: Row[Any], now: int) -> OAuthError:
    """A redeemed code came back: someone else holds it. Only an approved code is redeemed, so
    it names its grant, which is revoked."""
    return replayed(conn, client, row.grant_id or "", now, kind="device_code")


def _poll(
    ctx: TokenServices,
    conn: Connection,
    client: Client,
    form: dict[str, str],
    now: int,
    jkt: str | None,
    resources: Resources,
) -> Issuance | OAuthError:
    device_code = form.get("device_code")
    if not device_code:
        return InvalidRequest("device_code is required")
    row = devices.by_digest(conn, digest(device_code))
    if row is None or row.client_id != client.client_id:
        return InvalidGrant("The device code is invalid")
    try:
        checks.check_same_resource(
            form.get("resource"), row.resource, "resource differs from the device authorization"
        )
        # before the code is redeemed: the retry with a proof may use it
        require_proof(client, resources.by_uri.get(row.resource), jkt)
    except OAuthError as error:
        return error
    if row.redeemed_at is not None:
        return _replayed(conn, client, row, now)
    if row.expires_at <= now:
        return ExpiredToken("The device code has expired: start again on the device")
    if row.status != devices.APPROVED:
        return _undecided(conn, row, now)
    return _issue(ctx, conn, client, row, now, jkt, resources)


def poll(
    ctx: TokenServices, client: Client, form: dict[str, str], *, jkt: str | None = None
) -> Issuance:
    """Answer a device's poll: its tokens once the person approved (``jkt``: the DPoP key the
    request proved, if any).

    Raises:
        OAuthError: invalid_request, invalid_grant, invalid_target, authorization_pending,
            slow_down, access_denied, expired_token, or unsupported_grant_type when the
            operator turned the device flow off.
    """
    if not ctx.settings.device_flow:
        raise UnsupportedGrantType(f"grant_type {GRANT!r} is not supported")
    # the poll's record (and a replay's revocation) is committed even when the answer is an error
    return in_one_transaction(ctx, _poll, client, form, jkt)
