"""Issuing tokens: RFC 9068 JWT access tokens and rotating refresh tokens. A person's access
token carries the claims of their account that its resource asks for (``token_claims``, none
by default), as the account holds them when the token is issued."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpauth import jwt
from mcpauth.errors import InvalidDPoPProof, InvalidGrant, OAuthError
from mcpauth.oauth import IDENTITY_SCOPES, format_scope, parse_scope
from mcpauth.server.authorization.checks import OPENID
from mcpauth.server.config import Settings
from mcpauth.server.crypto import digest, new_token
from mcpauth.server.identity import methods
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store, identities
from mcpauth.server.storage.database import Connection, Record, Session
from mcpauth.server.storage.models import Client, Resource
from mcpauth.server.tokens import openid

if TYPE_CHECKING:
    from mcpauth.server.authorization.resources import Resources
    from mcpauth.server.tokens.services import TokenServices

# the claims about a person a resource may ask its access tokens to carry
PERSON_CLAIMS = ("email", "email_verified", "name", "groups")


@dataclass
class Issuance:
    """What a grant hands out; signed after the database transaction commits."""

    claims: dict[str, Any]
    scopes: list[str]  # the response's ``scope``: everything granted (the OpenID scopes too)
    refresh_token: str | None = None
    issued_token_type: str | None = None  # RFC 8693 §2.2.1, for token exchange
    id_token: dict[str, Any] | None = None  # its claims; signed with the access token

    @classmethod
    def of(
        cls,
        claims: dict[str, Any],
        scopes: list[str],
        *,
        jkt: str | None,
        issued_token_type: str | None = None,
    ) -> Issuance:
        """What a grant hands out, its access token bound to the DPoP key ``jkt`` the request
        proved, if any."""
        issuance = cls(claims, scopes, issued_token_type=issued_token_type)
        if jkt is not None:
            issuance.bind(jkt)
        return issuance

    def bind(self, jkt: str) -> None:
        """Bind the access token to a DPoP key (RFC 9449 §6.1: ``cnf.jkt``)."""
        self.claims["cnf"] = {"jkt": jkt}

    def response(self, signer: jwt.CompactSigner) -> dict[str, Any]:
        """The token response, the access token signed by ``signer``; a DPoP-bound token
        says so in ``token_type`` (RFC 9449 §5)."""
        access_token = signer.sign(self.claims)
        body: dict[str, Any] = {
            "access_token": access_token,
            "token_type": "DPoP" if "cnf" in self.claims else "Bearer",
            "expires_in": self.claims["exp"] - self.claims["iat"],
            "scope": format_scope(self.scopes),
        }
        if self.refresh_token is not None:
            body["refresh_token"] = self.refresh_token
        if self.id_token is not None:
            body["id_token"] = openid.sign_id_token(signer, self.id_token, access_token)
        if self.issued_token_type is not None:
            body["issued_token_type"] = self.issued_token_type
        return body


@dataclass
class UpstreamIssuance(Issuance):
    """A token exchange's answer that is the caller's token at an upstream provider: handed
    out as it is (never signed here), with the provider's expiry."""

    upstream_access_token: str = ""

    def bind(self, jkt: str) -> None:
        """An upstream token cannot be bound to the caller's key here: it stays Bearer."""

    def response(self, signer: jwt.CompactSigner) -> dict[str, Any]:
        return {
            "access_token": self.upstream_access_token,
            "issued_token_type": self.issued_token_type,
            "token_type": "Bearer",
            "expires_in": max(0, self.claims["exp"] - self.claims["iat"]),
        }


def require_proof(client: Client, resource: Resource | None, jkt: str | None) -> None:
    """Refuse a token request without a DPoP proof from a client registered with
    ``dpop_bound_access_tokens`` (RFC 9449 §5.2) or for a resource that takes DPoP-bound
    tokens only. Called before anything is consumed, so the retry with a proof works.

    Raises:
        InvalidDPoPProof: no proof.
    """
    if jkt is not None:
        return
    if client.client_metadata.get("dpop_bound_access_tokens") is True:
        raise InvalidDPoPProof("This client is registered for DPoP-bound tokens: send a proof")
    if resource is not None and resource.dpop_required:
        raise InvalidDPoPProof(f"{resource.uri} accepts DPoP-bound tokens only: send a proof")


def access_token_claims(
    settings: Settings,
    *,
    subject: str,
    client_id: str,
    resource: str,
    scopes: list[str],
    now: int,
    grant_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """RFC 9068 §2.2 claims; ``aud`` is the canonical resource (RFC 8707)."""
    claims: dict[str, Any] = {
        "iss": settings.issuer,
        "sub": subject,
        "aud": resource,
        "client_id": client_id,
        "scope": format_scope(scopes),
        "iat": now,
        "exp": now + settings.access_token_ttl,
        "jti": secrets.token_urlsafe(16),
    }
    if grant_id is not None:
        claims["gid"] = grant_id
    claims.update(extra or {})
    return claims


def person_claims(
    conn: Connection | Session, resource: Resource | None, user_id: str
) -> dict[str, Any]:
    """The claims about the person ``user_id`` that ``resource``'s access tokens carry (its
    ``token_claims``), read now: those of the account's most recent upstream sign-in; a local
    account's ``name`` is its username. A claim without a value is left out, and a subject that
    is no account (a client) gets none.

    ``email`` is released only when the provider verified it, and always with
    ``email_verified: true`` beside it: a resource that trusts ``email`` must never be handed
    an address anyone could create at a provider. An unverified address is told to no resource
    (``email_verified: false`` alone, when the resource asks for that claim)."""
    wanted = resource.token_claims if resource is not None else []
    if not wanted:
        return {}
    found = identities.person(conn, user_id)
    if found is None:
        return {}
    verified_email = found.email if found.email is not None and found.email_verified else None
    if "email" in wanted and verified_email is not None:
        wanted = [*wanted, "email_verified"]
    values: dict[str, Any] = {
        "email": verified_email,
        "email_verified": found.email_verified if found.email is not None else None,
        "name": found.name or (found.username if found.local else None),
        "groups": list(found.groups) or None,
    }
    return {
        claim: values[claim]
        for claim in PERSON_CLAIMS
        if claim in wanted and values[claim] is not None
    }


def for_grant(
    settings: Settings,
    conn: Connection,
    grant: Record,
    scopes: list[str],
    now: int,
    *,
    resource: Resource | None,
    jkt: str | None,
) -> Issuance:
    """An access token for a user's grant (its user, client and resource), with the claims
    about the person its ``resource`` asks for (:func:`person_claims`) and how the person signed
    in (``amr``, RFC 9068 §2.2.1, when the sign-in named its methods), bound to the DPoP key
    ``jkt`` the request proved, if any. The OpenID scopes stay out of the token's ``scope``:
    they are about the client, not the resource that reads it."""
    person = person_claims(conn, resource, grant.user_id)
    amr = methods.as_claim(grant.amr)
    if amr is not None:
        person = {**person, "amr": amr}
    claims = access_token_claims(
        settings,
        subject=grant.user_id,
        client_id=grant.client_id,
        resource=grant.resource,
        scopes=[s for s in scopes if s not in IDENTITY_SCOPES],
        now=now,
        grant_id=grant.id,
        extra=person,
    )
    return Issuance.of(claims, scopes, jkt=jkt)


def for_person(
    settings: Settings,
    conn: Connection,
    client: Client,
    grant: Record,
    scope: str,
    now: int,
    *,
    resource: Resource | None,
    jkt: str | None,
    auth_time: int,
    nonce: str | None,
    offline: bool,
) -> Issuance:
    """What a person's grant hands out when the code that carries its approval is redeemed (an
    authorization code, an approved device code): the access token (:func:`for_grant`), an ID
    token when ``openid`` was granted (OpenID Connect Core §3.1.3.3), and a refresh token when
    the client may refresh or ``offline`` access was granted, bound to the DPoP key of a public
    client (RFC 9449 §5: a confidential client's already needs its own credentials)."""
    scopes = parse_scope(scope)
    issuance = for_grant(settings, conn, grant, scopes, now, resource=resource, jkt=jkt)
    if OPENID in scopes:
        issuance.id_token = openid.id_token_claims(
            settings,
            subject=grant.user_id,
            client_id=client.client_id,
            auth_time=auth_time,
            nonce=nonce,
            now=now,
            person=openid.person_claims(conn, grant.user_id, scopes),
            amr=grant.amr,
        )
    if "refresh_token" in client.grant_types or offline:
        public = client.token_endpoint_auth_method == "none"
        issuance.refresh_token = add_refresh_token(
            settings, conn, grant, scope=scope, now=now, dpop_jkt=jkt if public else None
        )
    return issuance


def for_client(
    settings: Settings,
    client_id: str,
    resource: str,
    scopes: list[str],
    now: int,
    *,
    gty: str,
    jkt: str | None,
) -> Issuance:
    """An access token for the client itself: its ``sub`` is the client and ``gty`` names the
    grant that made it a machine's token (docs/security.md T22); bound to the DPoP key ``jkt``
    the request proved, if any."""
    claims = access_token_claims(
        settings,
        subject=client_id,
        client_id=client_id,
        resource=resource,
        scopes=scopes,
        now=now,
        extra={"gty": gty},
    )
    return Issuance.of(claims, list(scopes), jkt=jkt)


def replayed(
    conn: Connection, client: Client, grant_id: str, now: int, *, kind: str
) -> InvalidGrant:
    """A single-use credential of ``grant_id`` (``kind``: ``authorization_code``,
    ``refresh_token``) came back (OAuth 2.1 §4.1.3, §4.3.1): the whole grant is revoked and
    the replay audited; the refusal to return.
    """
    grant_store.revoke_grant(conn, grant_id, now)
    audit("replay.detected", kind=kind, client_id=client.client_id, grant_id=grant_id)
    what = kind.replace("_", " ")
    return InvalidGrant(f"The {what} was already used; its grant is revoked")


# a single-use credential's redemption: (ctx, conn, client, form, now, jkt, resources)
Redemption = Callable[
    ["TokenServices", Connection, Client, dict[str, str], int, "str | None", "Resources"],
    "Issuance | OAuthError",
]


def in_one_transaction(
    ctx: TokenServices,
    redeem: Redemption,
    client: Client,
    form: dict[str, str],
    jkt: str | None,
) -> Issuance:
    """Run a single-use credential's ``redeem`` (an authorization code's, a refresh token's)
    in one database transaction that commits whatever it decides: a refusal it returns, rather
    than raises, keeps what it wrote (the credential consumed, a replayed grant revoked) and is
    raised once that is committed.

    Raises:
        OAuthError: the refusal ``redeem`` returned.
    """
    now = ctx.now()
    resources = ctx.resources.current()
    with ctx.db.transaction() as conn:
        outcome = redeem(ctx, conn, client, form, now, jkt, resources)
    if isinstance(outcome, OAuthError):
        raise outcome
    return outcome


def add_refresh_token(
    settings: Settings,
    conn: Connection,
    grant: Record,
    *,
    scope: str,
    now: int,
    dpop_jkt: str | None = None,
) -> str:
    """A new refresh token in ``grant``'s family; it expires when idle too long or when the
    family reaches its absolute lifetime, whichever is first; ``dpop_jkt`` binds it to a DPoP
    key."""
    token = new_token()
    family_end = grant.created_at + settings.refresh_token_ttl
    values = {
        "digest": digest(token),
        "grant_id": grant.id,
        "client_id": grant.client_id,
        "scope": scope,
        "resource": grant.resource,
        "created_at": now,
        "expires_at": min(now + settings.refresh_token_idle_ttl, family_end),
        "rotated_at": None,
        "dpop_jkt": dpop_jkt,
    }
    grant_store.add_refresh_token(conn, values, now)
    return token
