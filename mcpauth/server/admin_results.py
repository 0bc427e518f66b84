"""What :class:`~mcpauth.server.Admin` returns: typed dictionaries (``TypedDict``), plain JSON
objects at run time (what the ``mcpauth`` admin commands print) whose keys a type checker knows.
Times are seconds since the epoch."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "AuditEntry",
    "ClientInfo",
    "ClientListing",
    "KeyInfo",
    "KeyState",
    "MfaReset",
    "ResourceInfo",
    "RotatedKey",
    "SessionInfo",
    "UpstreamInfo",
    "UserGrant",
    "UserInfo",
    "UserListing",
]


class UserInfo(TypedDict):
    """A user just added: its id (the ``sub`` of its tokens) and name."""

    id: str
    username: str


class UserListing(UserInfo):
    """A user as listed, with when it was added (seconds since the epoch) and whether it is
    an administrator (may use the admin console)."""

    created_at: int
    admin: bool
    disabled: bool


class UserGrant(TypedDict):
    """One live grant of a person: the client and resource it is for, the scopes, when it was
    made and last used (seconds since the epoch)."""

    id: str
    client_id: str
    client_name: str
    resource: str
    scope: str
    created_at: int
    last_used_at: int


class SessionInfo(TypedDict):
    """One signed-in browser session of a person (never its id): when she signed in, how
    (RFC 8176 methods) and when the session ends."""

    auth_time: int
    amr: str
    expires_at: int


class AuditEntry(TypedDict):
    """One audit event as kept for searching: when, which event, the user, client and acting
    administrator it names (empty when none), the request it came from and its other fields."""

    at: int
    event: str
    user_id: str
    username: str
    client_id: str
    actor: str
    request_id: str
    details: dict[str, str]


class ResourceInfo(TypedDict):
    """A protected resource: its canonical URI, display name, scopes (name → description), the
    scopes granted when a client asks for none, whether it is the default resource, whether
    its tokens must be DPoP-bound, the person claims they carry and whether people need a
    second factor to authorize a client for it."""

    uri: str
    name: str
    scopes: dict[str, str]
    default_scopes: list[str]
    default: bool
    dpop_required: bool
    token_claims: list[str]
    require_mfa: bool


class ClientInfo(TypedDict):
    """A client just registered: its RFC 7591 §3.2.1 information, the secret shown once (for a
    confidential client) and its registered metadata (members left out when absent)."""

    client_id: str
    client_id_issued_at: int
    client_secret: NotRequired[str]
    client_secret_expires_at: NotRequired[int]
    registration_client_uri: str
    redirect_uris: list[str]
    grant_types: list[str]
    response_types: list[str]
    token_endpoint_auth_method: str
    application_type: str
    client_name: NotRequired[str]
    scope: NotRequired[str]
    jwks: NotRequired[dict[str, Any]]
    jwks_uri: NotRequired[str]


class ClientListing(TypedDict):
    """A client as listed: where it came from (``admin``, ``dcr`` or ``cimd``) and how it
    authenticates, where it may be redirected, what it may do, whether it is disabled."""

    client_id: str
    client_name: str
    source: str
    token_endpoint_auth_method: str
    redirect_uris: list[str]
    grant_types: list[str]
    first_party: bool
    introspect: bool
    disabled: bool


KeyState = Literal["next", "active", "retired", "expired"]


class KeyInfo(TypedDict):
    """A signing key and where it is in its rotation (times in seconds since the epoch)."""

    kid: str
    alg: str
    state: KeyState
    created_at: int
    active_at: int
    retired_at: int | None
    expires_at: int | None


class RotatedKey(TypedDict):
    """The key a rotation made next: it signs from ``active_at``."""

    kid: str
    alg: str
    active_at: int


class UpstreamInfo(TypedDict):
    """An upstream identity provider as configured: where its secret comes from and whether it
    can be read, the redirect URI to register there, how many people signed in through it, the
    endpoints of a provider without discovery and, when checked, whether it is reachable."""

    id: str
    name: str
    kind: str
    issuer: str
    client_id: str
    client_secret: str
    client_secret_readable: bool
    token_endpoint_auth_method: str
    scopes: list[str]
    allowed_email_domains: list[str]
    required_claims: dict[str, list[str]]
    redirect_uri: str
    authorization_endpoint: NotRequired[str | None]
    token_endpoint: NotRequired[str | None]
    userinfo_endpoint: NotRequired[str | None]
    accounts: int
    reachable: NotRequired[str]


class MfaReset(TypedDict):
    """What ``mcpauth users reset-mfa`` removed from an account."""

    username: str
    totp: bool
    passkeys: int
