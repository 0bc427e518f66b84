"""The jwt-bearer grant with an Identity Assertion JWT Authorization Grant (ID-JAG), the
enterprise-managed authorization extension (MCP AS-X2; RFC 7521 §5.2, RFC 7523 §3): the
identity provider vouches for a user, this server issues an access token for that user. An
assertion from a configured workload issuer goes to :mod:`.workload` instead. The issuer's keys
are loaded first, on the event loop (:func:`load_keys`), never in the request's worker thread.

How the person signed in at the identity provider is the assertion's ``amr`` (an ID-JAG may
carry the ``amr`` of the sign-in it stands for, as an ID token does): the access token carries
it on, and a resource that requires two factors is reached only with ``mfa`` in it
(docs/security.md T49)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpauth import jwt
from mcpauth.errors import (
    InvalidGrant,
    InvalidRequest,
    InvalidTarget,
    InvalidToken,
    OAuthError,
    UnauthorizedClient,
)
from mcpauth.oauth import JWT_BEARER
from mcpauth.server.authorization import checks
from mcpauth.server.config import Settings
from mcpauth.server.identity import methods
from mcpauth.server.identity.trusted_issuers import IdentityProviders
from mcpauth.server.operations.logs import audit
from mcpauth.server.operations.size_limits import MAX_SUBJECT_LENGTH, MAX_USERNAME_LENGTH
from mcpauth.server.storage import identities
from mcpauth.server.storage.defences import record_jti
from mcpauth.server.storage.lookups import find_or_add_user, user_disabled
from mcpauth.server.storage.models import Client, Resource
from mcpauth.server.tokens.grants import workload
from mcpauth.server.tokens.issuance import (
    Issuance,
    access_token_claims,
    person_claims,
    require_proof,
)
from mcpauth.server.tokens.services import TokenServices
from mcpauth.uris import URIError, canonical_resource

GRANT = JWT_BEARER
ID_JAG_TYPE = "oauth-id-jag+jwt"
REQUIRED = ("iss", "sub", "aud", "exp", "iat", "jti", "client_id", "resource")


def _keys_needed(
    ctx: TokenServices, assertion: str
) -> tuple[IdentityProviders, str, str | None] | None:
    """Whose keys :func:`issue` will check ``assertion`` with, by the same unverified routing:
    the issuers (workload platforms or identity providers), its ``iss`` and its ``kid``; None
    when it will be refused before any key is needed (not a JWT, no ``iss``, neither a
    workload token nor an ID-JAG)."""
    try:
        header = jwt.unverified_header(assertion)
        issuer = jwt.unverified_claims(assertion).get("iss")
    except OAuthError:
        return None
    if not isinstance(issuer, str):
        return None
    kid = header.get("kid")
    kid = kid if isinstance(kid, str) else None
    if str(header.get("typ", "")).lower() == ID_JAG_TYPE:
        return ctx.idps, issuer, kid
    if workload.is_workload_token(ctx.settings, assertion):
        return ctx.workload_keys, issuer, kid
    return None


async def load_keys(ctx: TokenServices, form: Mapping[str, str], requester: str) -> None:
    """Load the keys of the trusted issuer the request's assertion names, on the event loop
    before the request's worker thread runs (which then reads them from memory): a fetch that
    stalls holds no thread and no database work waits on the network. Nothing to do for an
    assertion that is missing, malformed or from an untrusted issuer: :func:`issue` refuses it.

    Raises:
        TemporarilyUnavailable: the issuer's keys cannot be loaded now.
    """
    needed = _keys_needed(ctx, form.get("assertion") or "")
    if needed is not None:
        issuers, issuer, kid = needed
        await issuers.load(issuer, kid=kid, requester=requester)


def _verify(idps: IdentityProviders, assertion: str) -> dict[str, Any]:
    header = jwt.unverified_header(assertion)
    if str(header.get("typ", "")).lower() != ID_JAG_TYPE:
        raise InvalidGrant(f"The assertion must have typ {ID_JAG_TYPE}")
    try:
        issuer = jwt.unverified_claims(assertion).get("iss")
    except InvalidToken as exc:
        raise InvalidGrant("The assertion is malformed") from exc
    if not isinstance(issuer, str) or not idps.is_trusted(issuer):
        raise InvalidGrant("The assertion's issuer is not a trusted identity provider")
    return idps.verify(
        assertion, issuer, typ=(ID_JAG_TYPE,), required=REQUIRED, what="The assertion"
    )


def _check_claims(
    settings: Settings, claims: dict[str, Any], client: Client, form: dict[str, str]
) -> str:
    aud = claims["aud"]
    # RFC 7519 §4.1.3: a string or an array of strings; any other member names nobody
    listed = aud if isinstance(aud, list) else [aud]
    audiences = {value for value in listed if isinstance(value, str)}
    if settings.issuer not in audiences:
        raise InvalidGrant("The assertion's aud must be this authorization server's issuer")
    if claims["client_id"] != client.client_id:
        raise InvalidGrant("The assertion was issued for another client")
    try:
        resource = canonical_resource(str(claims["resource"]))
    except URIError as exc:
        raise InvalidTarget(f"resource: {exc}") from exc
    checks.check_same_resource(
        form.get("resource"), resource, "resource differs from the assertion's resource"
    )
    return resource


def _sign_in_methods(settings: Settings, claims: dict[str, Any], resource: Resource) -> str:
    """How the identity provider says the person signed in (the assertion's ``amr``).

    Raises:
        InvalidGrant: ``resource`` requires two factors and the assertion does not say the
            person signed in with two (RFC 7521 §5.2: an assertion this server will not honour
            is ``invalid_grant``).
    """
    amr = methods.from_claim(claims.get("amr"))
    if methods.required(settings, resource) and not methods.has_two_factors(amr):
        raise InvalidGrant(
            f"{resource.name or resource.uri} requires a second factor: the assertion's amr "
            "must say the person signed in with two (mfa)"
        )
    return amr


def local_username(issuer: str, subject: str) -> str:
    """The local username standing for an identity provider's subject, the one an upstream
    sign-in of the same subject gets (:func:`mcpauth.server.storage.identities.local_username`),
    so both reach one account.

    Raises:
        InvalidGrant: the subject is longer than OpenID Connect allows, or the issuer leaves
            no room for it.
    """
    if len(subject) > MAX_SUBJECT_LENGTH:
        raise InvalidGrant(f"The assertion's sub is longer than {MAX_SUBJECT_LENGTH} characters")
    username = identities.local_username(issuer, subject)
    if len(username) > MAX_USERNAME_LENGTH:
        raise InvalidGrant("The assertion's iss is too long for a local user name")
    return username


def issue(
    ctx: TokenServices, client: Client, form: dict[str, str], *, jkt: str | None = None
) -> Issuance:
    """Exchange an ID-JAG for an access token (``jkt``: the DPoP key the request proved).

    Raises:
        OAuthError: invalid_request, invalid_grant, invalid_target or invalid_scope.
    """
    assertion = form.get("assertion")
    if not assertion:
        raise InvalidRequest("assertion is required")
    typ = str(jwt.unverified_header(assertion).get("typ", "")).lower()
    if typ != ID_JAG_TYPE and workload.is_workload_token(ctx.settings, assertion):
        return workload.issue(ctx, client, assertion, form, jkt=jkt)
    claims = _verify(ctx.idps, assertion)
    if client.token_endpoint_auth_method == "none":
        raise UnauthorizedClient("An ID-JAG needs a confidential client; this one is a workload")
    resource_uri = _check_claims(ctx.settings, claims, client, form)
    now = ctx.now()
    resource = checks.resolve_resource(ctx.resources.current(), resource_uri)
    require_proof(client, resource, jkt)
    amr = methods.as_claim(_sign_in_methods(ctx.settings, claims, resource))
    requested = checks.parse_scope(form.get("scope") or claims.get("scope"))
    # a token for the person the IdP names, without a refresh token or an ID token
    scopes = checks.resolve_scopes(
        requested, resource, client, offline_enabled=False, openid=False
    ).resource
    username = local_username(str(claims["iss"]), str(claims["sub"]))
    with ctx.db.write() as session:
        if not record_jti(session, str(claims["iss"]), str(claims["jti"]), int(claims["exp"]), now):
            audit("replay.detected", kind="id_jag", client_id=client.client_id)
            raise InvalidGrant("The assertion was already used")
        user_id = find_or_add_user(session, username, now)
        if user_disabled(session, user_id):  # the jti stays unused: nothing is written
            raise InvalidGrant("The account this assertion names is disabled")
        person = person_claims(session, resource, user_id)  # an ID-JAG names a person
    if amr is not None:
        person["amr"] = amr
    token = access_token_claims(
        ctx.settings,
        subject=user_id,
        client_id=client.client_id,
        resource=resource.uri,
        scopes=scopes,
        now=now,
        extra=person,
    )
    return Issuance.of(token, scopes, jkt=jkt)
