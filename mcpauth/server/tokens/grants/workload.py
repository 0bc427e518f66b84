"""Workload identity federation: the jwt-bearer grant (RFC 7523 §2.1) with a token the
workload's platform issued (a Kubernetes service-account token, a CI provider's OIDC token) as
the assertion, so a machine gets an access token with no shared secret. A configured rule
(``[[mcpauth.workloads]]``) names the issuer, whose keys verify the token, the subjects it
accepts and the client they act as; the token must be addressed to this server (``aud``) and
unexpired. The access token's subject is that client, as in client_credentials.

Unlike an ID-JAG, a platform token is not single use: a service-account token file is read
again for every request during its hour, so replaying it gives its own workload nothing more.
"""

from __future__ import annotations

from typing import Any

from mcpauth import jwt
from mcpauth.errors import InvalidGrant, InvalidToken
from mcpauth.server.authorization import checks
from mcpauth.server.config import Settings, WorkloadRule
from mcpauth.server.identity.trusted_issuers import IdentityProviders
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage.models import Client
from mcpauth.server.tokens.issuance import Issuance, for_client, require_proof
from mcpauth.server.tokens.services import TokenServices

# Tokens of other kinds a platform issuer may also sign: never a workload's identity.
REFUSED_TYPES = frozenset({"at+jwt", "application/at+jwt", "oauth-id-jag+jwt", "dpop+jwt"})
GTY = "workload"


def _unverified(assertion: str) -> tuple[str, str] | None:
    """(iss, sub) of an assertion, unverified, for choosing its rule; None if it has none."""
    try:
        claims = jwt.unverified_claims(assertion)
    except InvalidToken:
        return None
    iss, sub = claims.get("iss"), claims.get("sub")
    return (iss, sub) if isinstance(iss, str) and isinstance(sub, str) else None


def is_workload_token(settings: Settings, assertion: str) -> bool:
    """Whether a jwt-bearer assertion comes from a configured workload issuer."""
    try:
        issuer = jwt.unverified_claims(assertion).get("iss")
    except InvalidToken:
        return False
    return any(w.issuer == issuer for w in settings.workloads)


def client_for(settings: Settings, assertion: str) -> str | None:
    """The client a workload token acts as when the request names none: the one client of the
    rules its issuer and subject match; None when no rule or several clients match."""
    found = _unverified(assertion)
    if found is None:
        return None
    clients = {w.client_id for w in settings.workloads if w.matches(*found)}
    return clients.pop() if len(clients) == 1 else None


def _verify(keys: IdentityProviders, issuer: str, assertion: str) -> dict[str, Any]:
    typ = str(jwt.unverified_header(assertion).get("typ", "")).lower()
    if typ in REFUSED_TYPES:
        raise InvalidGrant(f"A {typ} token is not a workload identity token")
    return keys.verify(
        assertion,
        issuer,
        typ=None,
        required=("iss", "sub", "aud", "exp"),
        what="The workload token",
    )


def _rule(settings: Settings, claims: dict[str, Any], client: Client) -> WorkloadRule:
    """The rule that lets this token act as ``client``, its audience checked.

    Raises:
        InvalidGrant: no rule for this subject and client, or the token is for another audience.
    """
    issuer, subject = str(claims["iss"]), str(claims["sub"])
    rules = [w for w in settings.workloads if w.matches(issuer, subject)]
    rule = next((w for w in rules if w.client_id == client.client_id), None)
    if rule is None:
        raise InvalidGrant("No workload rule lets this token's subject act as this client")
    aud = claims["aud"]
    audiences = {a for a in (aud if isinstance(aud, list) else [aud]) if isinstance(a, str)}
    # by default this server's issuer or its token endpoint (what the draft names)
    expected = (
        {rule.audience}
        if rule.audience
        else {settings.issuer, settings.issuer.rstrip("/"), settings.endpoint_url("token")}
    )
    if not expected & audiences:
        raise InvalidGrant(f"The workload token's aud must be one of {', '.join(sorted(expected))}")
    return rule


def issue(
    ctx: TokenServices,
    client: Client,
    assertion: str,
    form: dict[str, str],
    *,
    jkt: str | None = None,
) -> Issuance:
    """An access token for the client a verified workload token (the jwt-bearer request's
    ``assertion``, :func:`is_workload_token`) acts as.

    Raises:
        OAuthError: invalid_grant, invalid_target or invalid_scope.
    """
    found = _unverified(assertion)
    if found is None:
        raise InvalidGrant("The workload token is malformed or has no iss and sub")
    claims = _verify(ctx.workload_keys, found[0], assertion)
    rule = _rule(ctx.settings, claims, client)
    resource = checks.resolve_resource(ctx.resources.current(), form.get("resource"))
    require_proof(client, resource, jkt)
    requested = checks.parse_scope(form.get("scope"))
    scopes = checks.scopes_without_refresh(requested, resource, client)
    audit(
        "workload.token",
        client_id=client.client_id,
        issuer=rule.issuer,
        subject=str(claims["sub"]),
    )
    return for_client(
        ctx.settings, client.client_id, resource.uri, scopes, ctx.now(), gty=GTY, jkt=jkt
    )
