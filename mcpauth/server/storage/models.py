"""SQLModel tables. Secrets (codes, refresh tokens, client secrets, registration access tokens)
are stored only as SHA-256 digests; times are integer Unix seconds from the server clock."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Column, Index, MetaData, Text, false
from sqlmodel import Field, SQLModel

# Stable constraint names so Alembic diffs cleanly on SQLite and PostgreSQL.
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata: MetaData = SQLModel.metadata


class User(SQLModel, table=True):
    __tablename__ = "users"

    id: str = Field(primary_key=True, max_length=64)  # opaque, stable: the token `sub`
    username: str = Field(max_length=200, unique=True)
    password_hash: str = Field(max_length=255)
    created_at: int
    # may use the admin console (/admin); granted by `mcpauth users add --admin|admin --grant`
    is_admin: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    # may not sign in, and her sessions count as signed out (`mcpauth users disable`)
    disabled: bool = Field(default=False, sa_column_kwargs={"server_default": false()})


class Client(SQLModel, table=True):
    __tablename__ = "clients"

    client_id: str = Field(primary_key=True, max_length=2048)
    secret_digest: str | None = Field(default=None, max_length=64)
    secret_expires_at: int = 0
    client_name: str = Field(default="", max_length=200)
    redirect_uris: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    grant_types: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    response_types: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    token_endpoint_auth_method: str = Field(max_length=40)
    application_type: str = Field(default="web", max_length=10)
    scope: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    jwks: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    jwks_uri: str | None = Field(default=None, max_length=2048)
    client_metadata: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column(JSON, nullable=False)
    )
    first_party: bool = False
    introspect: bool = False
    registration_token_digest: str | None = Field(default=None, max_length=64, index=True)
    source: str = Field(default="admin", max_length=10)  # admin | dcr | cimd
    # refused at every endpoint as if unknown (`mcpauth clients disable`), kept until enabled
    disabled: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    created_at: int


class Resource(SQLModel, table=True):
    __tablename__ = "resources"

    uri: str = Field(primary_key=True, max_length=2048)  # canonical (RFC 8707)
    name: str = Field(default="", max_length=200)
    scopes: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    default_scopes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    is_default: bool = False
    dpop_required: bool = False  # RFC 9449: only DPoP-bound tokens are issued for it
    token_claims: list[str] = Field(  # the person's claims its access tokens carry
        default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]")
    )
    # a person signs in with a second factor before authorizing a client for it
    require_mfa: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    created_at: int


class SigningKey(SQLModel, table=True):
    __tablename__ = "signing_keys"

    kid: str = Field(primary_key=True, max_length=64)
    alg: str = Field(max_length=10)
    public_jwk: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    private_key: str = Field(sa_column=Column(Text, nullable=False))  # Fernet-encrypted PEM
    created_at: int
    active_at: int  # signs from this time on (published before)
    retired_at: int | None = None  # stops signing
    expires_at: int | None = None  # leaves the JWKS


class Grant(SQLModel, table=True):
    """One user's authorization of one client for one resource: the family of every code,
    refresh token and access token issued from it."""

    __tablename__ = "grants"
    __table_args__ = (Index("ix_grants_user_id_client_id", "user_id", "client_id"),)

    id: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(max_length=64)
    client_id: str = Field(max_length=2048, index=True)  # pruning and deleting a client
    resource: str = Field(max_length=2048)
    scope: str = Field(default="", sa_column=Column(Text, nullable=False))
    created_at: int
    last_used_at: int
    revoked_at: int | None = None
    # RFC 8176 authentication methods of the sign-in that made it, space-separated
    amr: str = Field(default="", max_length=64, sa_column_kwargs={"server_default": ""})


class AuthorizationCode(SQLModel, table=True):
    __tablename__ = "authorization_codes"

    digest: str = Field(primary_key=True, max_length=64)
    grant_id: str = Field(max_length=64, index=True)
    client_id: str = Field(max_length=2048)
    user_id: str = Field(max_length=64)
    redirect_uri: str = Field(max_length=2048)
    code_challenge: str = Field(max_length=128)
    resource: str = Field(max_length=2048)
    scope: str = Field(default="", sa_column=Column(Text, nullable=False))
    offline: bool = False  # a refresh token may be issued
    auth_time: int
    created_at: int
    expires_at: int
    redeemed_at: int | None = None
    # RFC 9449 §10: the key the authorization request named; the exchange must prove it
    dpop_jkt: str | None = Field(default=None, max_length=64)
    nonce: str | None = Field(default=None, max_length=255)  # OpenID Connect Core §3.1.2.1


class RefreshToken(SQLModel, table=True):
    __tablename__ = "refresh_tokens"

    digest: str = Field(primary_key=True, max_length=64)
    grant_id: str = Field(max_length=64, index=True)
    client_id: str = Field(max_length=2048, index=True)  # deleting a client
    scope: str = Field(default="", sa_column=Column(Text, nullable=False))
    resource: str = Field(max_length=2048)
    created_at: int
    expires_at: int
    rotated_at: int | None = None
    # RFC 9449 §5: a public client's refresh token only works with proofs of this key
    dpop_jkt: str | None = Field(default=None, max_length=64)


class Consent(SQLModel, table=True):
    """What a user approved for a client and resource, with what the consent page showed: the
    exact redirect URI and the client's name (a remembered consent holds only for those)."""

    __tablename__ = "consents"

    user_id: str = Field(primary_key=True, max_length=64)
    client_id: str = Field(primary_key=True, max_length=2048)
    resource: str = Field(primary_key=True, max_length=2048)
    scope: str = Field(default="", sa_column=Column(Text, nullable=False))
    redirect_uri: str = Field(default="", max_length=2048, sa_column_kwargs={"server_default": ""})
    client_name: str = Field(default="", max_length=200, sa_column_kwargs={"server_default": ""})
    updated_at: int  # the user's last explicit approval


class BrowserSessionRecord(SQLModel, table=True):
    """A signed-in browser session (the cookie holds only the id, stored here as a digest)."""

    __tablename__ = "browser_sessions"

    digest: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(max_length=64, index=True)
    auth_time: int
    created_at: int
    expires_at: int = Field(index=True)
    # RFC 8176 methods of the sign-in, space-separated ("pwd otp mfa")
    amr: str = Field(default="", max_length=64, sa_column_kwargs={"server_default": ""})


class Interaction(SQLModel, table=True):
    """A validated authorization request waiting for login and consent."""

    __tablename__ = "interactions"

    id: str = Field(primary_key=True, max_length=64)
    request: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: int
    expires_at: int = Field(index=True)


class Throttle(SQLModel, table=True):
    """Failure counters shared by every replica (login, client authentication)."""

    __tablename__ = "throttles"

    key: str = Field(primary_key=True, max_length=300)
    failures: int = 0
    window_start: int
    locked_until: int = 0


class RevokedAccessToken(SQLModel, table=True):
    """Deny-list of revoked access tokens (RFC 7009), kept until the token expires."""

    __tablename__ = "revoked_access_tokens"

    jti: str = Field(primary_key=True, max_length=128)
    expires_at: int = Field(index=True)


class UsedAssertion(SQLModel, table=True):
    """``jti``s of JWT assertions already presented (RFC 7523 §3 replay protection)."""

    __tablename__ = "used_assertions"

    key: str = Field(primary_key=True, max_length=64)  # SHA-256 of issuer and jti
    expires_at: int = Field(index=True)


class RateCounter(SQLModel, table=True):
    """Fixed-window request counters shared by every replica (rate limits)."""

    __tablename__ = "rate_counters"

    key: str = Field(primary_key=True, max_length=300)
    window_start: int
    count: int = 0


class UpstreamIdentity(SQLModel, table=True):
    """A person at an upstream OpenID provider, (issuer, subject), and the account they sign
    in to; the claims are those of their last sign-in."""

    __tablename__ = "upstream_identities"
    __table_args__ = (  # one identity per issuer per account (migration 0012)
        Index("ix_upstream_identities_user_issuer", "user_id", "issuer", unique=True),
    )

    issuer: str = Field(primary_key=True, max_length=300)
    subject: str = Field(primary_key=True, max_length=255)
    user_id: str = Field(max_length=64, index=True)
    provider_id: str = Field(max_length=32)  # the provider configured when last used
    email: str | None = Field(default=None, max_length=320)
    email_verified: bool = False
    name: str | None = Field(default=None, max_length=200)
    groups: list[str] = Field(  # the group names of the last sign-in (JSON array)
        default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]")
    )
    created_at: int
    last_login_at: int


class UpstreamToken(SQLModel, table=True):
    """A person's tokens at an upstream provider (``keep_tokens``), encrypted as one sealed
    JSON document (AES-GCM, the key derived from the server secret, the row's key as
    associated data): a copied database row is useless without the secret and cannot be moved
    to another person or provider."""

    __tablename__ = "upstream_tokens"

    user_id: str = Field(primary_key=True, max_length=64)
    provider_id: str = Field(primary_key=True, max_length=32)
    sealed: str = Field(sa_column=Column(Text, nullable=False))
    expires_at: int | None = None  # of the access token, as the provider said
    updated_at: int


class UpstreamLogin(SQLModel, table=True):
    """A sign-in sent to an upstream provider and not back yet: the digest of its ``state``,
    the provider, the pending authorization (none: the account page) and the digest of the
    browser session that may finish it. Single use; the PKCE verifier and the nonce are derived
    from the state with a server key, so nothing here lets anyone finish it."""

    __tablename__ = "upstream_logins"

    digest: str = Field(primary_key=True, max_length=64)
    provider_id: str = Field(max_length=32)
    interaction_id: str | None = Field(default=None, max_length=64)
    session_digest: str = Field(max_length=64, index=True)
    created_at: int
    expires_at: int = Field(index=True)


class DeviceAuthorization(SQLModel, table=True):
    """A device authorization request (RFC 8628 §3.1): its device code and user code only as
    digests (the user code's keyed: it has few bits), what was asked for, and how it ends:
    approved by a person (their grant), denied, or redeemed once at the token endpoint."""

    __tablename__ = "device_authorizations"

    digest: str = Field(primary_key=True, max_length=64)  # of the device code
    user_code_digest: str = Field(max_length=64, unique=True)
    client_id: str = Field(max_length=2048, index=True)  # the cap per client
    resource: str = Field(max_length=2048)
    scope: str = Field(default="", sa_column=Column(Text, nullable=False))
    offline: bool = False  # offline_access was asked for and granted
    created_at: int
    expires_at: int = Field(index=True)
    interval: int  # seconds between polls (RFC 8628 §3.5: slow_down adds 5)
    polled_at: int | None = None
    status: str = Field(default="pending", max_length=10)  # pending | approved | denied
    user_id: str | None = Field(default=None, max_length=64)
    auth_time: int | None = None
    grant_id: str | None = Field(default=None, max_length=64)
    redeemed_at: int | None = None


class TotpFactor(SQLModel, table=True):
    """A person's TOTP secret (RFC 6238), sealed like kept upstream tokens (AES-GCM, the key
    derived from the server secret, the user id as associated data). Active once confirmed with
    a code; ``last_step`` is the time step of the last code accepted, so no code is used twice."""

    __tablename__ = "totp_factors"

    user_id: str = Field(primary_key=True, max_length=64)
    sealed: str = Field(sa_column=Column(Text, nullable=False))
    confirmed_at: int | None = None
    last_step: int = 0
    created_at: int


class RecoveryCode(SQLModel, table=True):
    """One of a person's one-time recovery codes, as the SHA-256 digest of the user id and the
    code; ``used_at`` is set by the one use it has."""

    __tablename__ = "recovery_codes"

    digest: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(max_length=64, index=True)
    created_at: int
    used_at: int | None = None


class Passkey(SQLModel, table=True):
    """A WebAuthn credential (a passkey) of a person: its id (base64url), its COSE public key
    (base64url) and the signature counter the authenticator last reported."""

    __tablename__ = "passkeys"

    credential_id: str = Field(primary_key=True, max_length=1400)
    user_id: str = Field(max_length=64, index=True)
    public_key: str = Field(sa_column=Column(Text, nullable=False))
    sign_count: int = 0
    name: str = Field(default="", max_length=100)
    created_at: int
    last_used_at: int | None = None


class PendingSignIn(SQLModel, table=True):
    """A browser half signed in: its first factor is done (``amr``), a second is due. Keyed by
    the digest of the browser session id, short-lived, taken once by the second step."""

    __tablename__ = "pending_sign_ins"

    digest: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(max_length=64)
    amr: str = Field(default="", max_length=64)
    interaction_id: str | None = Field(default=None, max_length=64)
    created_at: int
    expires_at: int = Field(index=True)


class AuditEvent(SQLModel, table=True):
    """One audit event as the audit log wrote it (identifiers and names only: never a token,
    code, secret or password), kept ``audit_retention`` seconds for the console's search."""

    __tablename__ = "audit_events"

    id: int | None = Field(default=None, primary_key=True)
    at: int = Field(index=True)
    event: str = Field(max_length=64, index=True)
    user_id: str = Field(default="", max_length=64, index=True)
    username: str = Field(default="", max_length=200, index=True)
    client_id: str = Field(default="", max_length=2048, index=True)
    actor: str = Field(default="", max_length=200)  # the administrator who acted, if one did
    request_id: str = Field(default="", max_length=64)
    details: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
