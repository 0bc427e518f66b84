"""Token exchange (RFC 8693) for an MCP server that calls another protected resource as its
caller: the server, a confidential client the operator allowed to exchange, sends the access
token it received (``subject_token``) and gets an access token for a resource it is allowed to
reach, for the same user, with an ``act`` claim naming itself (RFC 8693 §4.1).

With ``audience`` naming an upstream provider (its ``id``) instead of a resource, the answer
is the caller's own access token at that provider (kept at sign-in, ``keep_tokens``, refreshed
here when it has expired), for resources the provider's configuration lists in
``release_to``: the MCP server then calls the provider's API as the caller.

What the operator allows is part of the client's registration: ``exchange_from`` (the resources
whose tokens it may present, usually its own URL) and ``exchange_to`` (the resources it may get
tokens for). The new token lives no longer than the subject token, carries its grant (revoking
the user's grant revokes it too), has scopes of the target resource that the client may have,
and gets no refresh token; it carries the claims about the person that the target resource asks
for, read at the exchange, and how they signed in (the subject token's ``amr``). A person's
token is exchanged for a resource that requires two factors only when it says they signed in
with two (``amr`` ``mfa``; docs/security.md T49). Every exchange is audited.
"""

from __future__ import annotations

from typing import Any

from mcpauth.errors import (
    InvalidGrant,
    InvalidRequest,
    InvalidTarget,
    TemporarilyUnavailable,
    UnauthorizedClient,
)
from mcpauth.oauth import TOKEN_EXCHANGE, format_scope
from mcpauth.server.authorization import checks
from mcpauth.server.identity import methods
from mcpauth.server.identity.kept_tokens import TokensGone, fresh_tokens
from mcpauth.server.identity.upstream import Provider, UpstreamUnavailable
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage.lookups import user_disabled
from mcpauth.server.storage.models import Client, Resource
from mcpauth.server.tokens.introspection import access_token_claims as verified_claims
from mcpauth.server.tokens.issuance import (
    Issuance,
    UpstreamIssuance,
    access_token_claims,
    person_claims,
    require_proof,
)
from mcpauth.server.tokens.services import TokenServices
from mcpauth.uris import URIError, canonical_resource

GRANT = TOKEN_EXCHANGE
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
SUBJECT_TYPES = (ACCESS_TOKEN_TYPE, "urn:ietf:params:oauth:token-type:jwt")


def _target(form: dict[str, str]) -> str:
    """The one resource asked for, by ``resource`` or by ``audience`` (RFC 8693 §2.1; here an
    audience is a resource URI); both must agree when both are sent.

    Raises:
        InvalidTarget: none, or they disagree, or it is not a URI.
    """
    named = [form[name] for name in ("resource", "audience") if form.get(name)]
    if not named:
        raise InvalidTarget("Name the resource to get a token for (resource or audience)")
    try:
        targets = {canonical_resource(value) for value in named}
    except URIError as exc:
        raise InvalidTarget(f"resource: {exc}") from exc
    if len(targets) > 1:
        raise InvalidTarget("resource and audience name different resources")
    return targets.pop()


def _subject(ctx: TokenServices, form: dict[str, str]) -> dict[str, Any]:
    token = form.get("subject_token")
    token_type = form.get("subject_token_type")
    if not token or not token_type:
        raise InvalidRequest("subject_token and subject_token_type are required")
    if token_type not in SUBJECT_TYPES:
        raise InvalidRequest(f"subject_token_type must be {ACCESS_TOKEN_TYPE}")
    if form.get("actor_token") or form.get("actor_token_type"):
        raise InvalidRequest("actor tokens are not supported: the client is the actor")
    wanted = form.get("requested_token_type")
    if wanted is not None and wanted != ACCESS_TOKEN_TYPE:
        raise InvalidRequest(f"requested_token_type must be {ACCESS_TOKEN_TYPE}")
    claims = verified_claims(ctx, token)
    if claims is None:
        # RFC 8693 §2.2.2: an unacceptable subject token is invalid_request
        raise InvalidRequest("The subject_token is not an active access token of this server")
    return claims


def _upstream_token(
    ctx: TokenServices, client: Client, subject: dict[str, Any], provider: Provider
) -> Issuance:
    """The caller's access token at ``provider``, refreshed when it has (nearly) expired.

    Raises:
        InvalidTarget: the provider keeps no tokens, or not for the subject token's resource.
        InvalidGrant: nothing is kept for this person, or the provider refused the refresh
            (the person must sign in through it again).
        TemporarilyUnavailable: the provider could not be reached.
    """
    config = provider.config
    if subject.get("gty"):
        raise InvalidRequest("A machine's token has no person's upstream token behind it")
    if not config.keep_tokens or subject["aud"] not in config.release_to:
        raise InvalidTarget(f"{provider.id} tokens are not released to {subject['aud']}")
    user_id, now = str(subject["sub"]), ctx.now()
    try:
        tokens = fresh_tokens(ctx.db, ctx.upstream, ctx.upstream_token_key, user_id, provider, now)
    except TokensGone as exc:
        raise InvalidGrant(
            f"No usable {provider.name} token is kept for this person ({exc.reason}): sign in again"
        ) from exc
    except UpstreamUnavailable as exc:
        raise TemporarilyUnavailable(f"{provider.name} cannot be reached; try again") from exc
    audit(
        "token.exchanged",
        client_id=client.client_id,
        sub=user_id,
        from_aud=str(subject["aud"]),
        to_upstream=provider.id,
    )
    return UpstreamIssuance(
        # never outlives the caller's token (nor an hour, when the provider names no expiry)
        {"exp": min(tokens.expires_at or now + 3600, int(subject["exp"])), "iat": now},
        [],
        issued_token_type=ACCESS_TOKEN_TYPE,
        upstream_access_token=tokens.access_token,
    )


def _sign_in_methods(ctx: TokenServices, subject: dict[str, Any], resource: Resource) -> str:
    """How the subject token's person signed in (its ``amr``), which the new token carries on.

    Raises:
        InvalidRequest: ``resource`` requires two factors and the subject token does not say
            its person signed in with two. RFC 8693 §2.2.2 makes an unacceptable subject token
            ``invalid_request`` (as an inactive one is here); the caller's own sign-in is what
            falls short, not the target (``invalid_target``) nor a grant of this client's.
    """
    amr = methods.from_claim(subject.get("amr"))
    if methods.required(ctx.settings, resource) and not methods.has_two_factors(amr):
        raise InvalidRequest(
            f"{resource.name or resource.uri} requires a second factor and the subject_token's "
            "person signed in with one: they must sign in again with two"
        )
    return amr


def exchange(
    ctx: TokenServices, client: Client, form: dict[str, str], *, jkt: str | None = None
) -> Issuance:
    """An access token for another resource, for the subject token's user, acted by
    ``client``.

    Raises:
        OAuthError: invalid_request, unauthorized_client, invalid_target or invalid_scope.
    """
    policy = client.client_metadata
    allowed_from = policy.get("exchange_from") or []
    allowed_to = policy.get("exchange_to") or []
    subject = _subject(ctx, form)
    if subject["aud"] not in allowed_from:
        raise UnauthorizedClient("This client may not exchange tokens issued for that resource")
    provider = ctx.upstream.get(form.get("audience") or "") if not form.get("resource") else None
    if provider is not None:
        return _upstream_token(ctx, client, subject, provider)
    target_uri = _target(form)
    if target_uri not in allowed_to:
        raise InvalidTarget(f"This client may not get tokens for {target_uri}")
    resource = checks.resolve_resource(ctx.resources.current(), target_uri)
    require_proof(client, resource, jkt)
    requested = checks.parse_scope(form.get("scope"))
    scopes = checks.scopes_without_refresh(requested, resource, client)
    now = ctx.now()
    actor: dict[str, Any] = {"sub": client.client_id}
    if isinstance(subject.get("act"), dict):
        actor["act"] = subject["act"]  # RFC 8693 §4.1: the earlier actors, nested
    person: dict[str, Any] = {}
    if "gty" in subject:  # a machine's token: the exchanged one stays marked as a machine's
        person = {"gty": subject["gty"]}
    else:  # a person's: their claims, as the target resource asks, and how they signed in
        amr = methods.as_claim(_sign_in_methods(ctx, subject, resource))
        with ctx.db.read() as session:
            if user_disabled(session, str(subject["sub"])):
                raise InvalidRequest("The subject_token's user is disabled")
            person = person_claims(session, resource, str(subject["sub"]))
        if amr is not None:
            person["amr"] = amr
    claims = access_token_claims(
        ctx.settings,
        subject=str(subject["sub"]),
        client_id=client.client_id,
        resource=resource.uri,
        scopes=scopes,
        now=now,
        grant_id=subject.get("gid") if isinstance(subject.get("gid"), str) else None,
        extra={**person, "act": actor},
    )
    claims["exp"] = min(claims["exp"], int(subject["exp"]))
    audit(
        "token.exchanged",
        client_id=client.client_id,
        sub=str(subject["sub"]),
        from_aud=str(subject["aud"]),
        to_aud=resource.uri,
        scope=format_scope(scopes),
    )
    return Issuance.of(claims, scopes, jkt=jkt, issued_token_type=ACCESS_TOKEN_TYPE)
