"""Server settings: command-line flags over ``MCPAUTH_*`` environment variables over an
optional TOML file over defaults. Nothing global: ``create_app`` takes a ``Settings``."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mcpauth.errors import ConfigurationError
from mcpauth.server.federation_settings import UpstreamProvider, WorkloadRule
from mcpauth.server.outbound import parse_proxy

__all__ = ["Settings", "UpstreamProvider", "WorkloadRule", "load_settings", "reference"]
from mcpauth.uris import check_issuer

ENV_PREFIX = "MCPAUTH_"
_HEX_COLOUR = re.compile(r"^#[0-9a-fA-F]{6}$")


def is_colour(value: str) -> bool:
    """A colour written ``#rrggbb``."""
    return bool(_HEX_COLOUR.match(value))


RegistrationPolicy = Literal["open", "closed", "token"]


def default_data_dir() -> Path:
    """Where the embedded database and its generated key live (per-user data directory)."""
    return Path(platformdirs.user_data_dir("mcpauth", appauthor=False))


def default_database_url() -> str:
    return f"sqlite:///{default_data_dir() / 'mcpauth.db'}"


class Settings(BaseModel):
    """Everything the authorization server is configured with."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    issuer: str = "http://127.0.0.1:9000"
    """The issuer URL, served byte for byte; https, or http on a loopback host only."""
    host: str = "127.0.0.1"
    """The address `mcpauth serve` listens on."""
    port: int = Field(default=9000, ge=0, le=65535)
    """The port `mcpauth serve` listens on."""
    database_url: str = Field(default_factory=default_database_url)
    """`sqlite:///PATH` (the default: a file in the per-user data directory) or
    `postgresql://…` for several replicas."""
    secret_key: str | None = None
    """The secret from which the key-encryption key and the cookie-signing key are derived; the
    same on every replica. Generated next to an embedded SQLite database when unset."""
    signing_alg: Literal["ES256", "RS256", "EdDSA"] = "ES256"
    """The algorithm of new signing keys."""
    access_token_ttl: int = Field(default=600, ge=30, le=86400)
    """Seconds an access token lives."""
    authorization_code_ttl: int = Field(default=60, ge=5, le=600)
    """Seconds an authorization code may be redeemed."""
    refresh_token_ttl: int = Field(default=30 * 86400, ge=60)
    """Absolute lifetime of a refresh-token family, in seconds."""
    refresh_token_idle_ttl: int = Field(default=14 * 86400, ge=60)
    """Seconds a refresh token may go unused."""
    refresh_token_reuse_grace: int = Field(default=30, ge=0, le=300)
    """Seconds after a refresh token is rotated during which the same client (with the same DPoP
    key, for a bound token) may present it again and get a new pair from the same grant, as
    parallel refreshes and retries after a lost response do; past it, reuse revokes the grant.
    0: strict single use. The default and what a thief gains within it: docs/security.md T13."""
    interaction_ttl: int = Field(default=600, ge=60, le=3600)
    """Seconds a person has to sign in and decide on a pending authorization request."""
    session_ttl: int = Field(default=8 * 3600, ge=60)
    """Seconds a browser sign-in lasts."""
    unproven_client_consent_window: int = Field(default=600, ge=0, le=86400)
    """Seconds a remembered consent spares the consent page for a client whose identity cannot
    be proven (public, loopback or custom-scheme redirect), and only for the exact redirect
    URI approved; 0 asks every time."""
    device_flow: bool = True
    """Offer the device authorization grant (RFC 8628): `/device_authorization`, the `/device`
    page where a person types the code a device shows, and the device_code grant. A client uses
    it only when registered for the grant `urn:ietf:params:oauth:grant-type:device_code`."""
    device_code_ttl: int = Field(default=600, ge=60, le=1800)
    """Seconds a device authorization (its device code and user code) lives."""
    device_poll_interval: int = Field(default=5, ge=1, le=60)
    """The least number of seconds between two polls of the token endpoint by a device
    (RFC 8628 §3.2 `interval`); polling faster answers `slow_down` and adds 5 seconds."""
    device_max_pending: int = Field(default=10_000, ge=1)
    """Pending device authorizations the server keeps at once, all clients together; past it
    `/device_authorization` answers 503 `temporarily_unavailable` (docs/security.md)."""
    device_max_pending_per_client: int = Field(default=100, ge=1)
    """Pending device authorizations one client may have at once; past it 429
    `too_many_requests`."""
    device_user_code_failures: int = Field(default=10, ge=1)
    """Wrong user codes one address may type on `/device` within 15 minutes before it waits (a
    minute, doubling with each further one, up to an hour)."""
    device_user_code_failures_total: int = Field(default=300, ge=1)
    """Wrong user codes all addresses together may type within 15 minutes before `/device`
    checks no code for a while: the bound on guessing from many addresses."""
    prune_interval: int = Field(default=300, ge=0)
    """Seconds between two runs of the pruner that deletes expired state (0: never in `serve`;
    `mcpauth db prune` does it on demand)."""
    audit_retention: int = Field(default=90 * 86400, ge=3600)
    """Seconds the audit events are kept in the database for the admin console's and
    `mcpauth audit search`'s search; the pruner deletes older ones (the log lines stay
    wherever the logs go)."""
    self_registered_client_unused_ttl: int = Field(default=86400, ge=60)
    """Seconds after which a client registered by dynamic registration or a metadata document
    that never obtained a grant is deleted by the pruner (admin-registered clients never). A
    confidential client's registration response says so: its `client_secret_expires_at` is
    this deadline, not 0 ("never")."""
    self_registered_client_idle_ttl: int = Field(default=90 * 86400, ge=60)
    """Seconds without any use of its grants after which a self-registered client is deleted;
    a grant keeps its client no longer than the grant lives (`refresh_token_ttl`). An RFC 7592
    read gives the deadline so moved as `client_secret_expires_at`."""
    key_rotation_delay: int = Field(default=0, ge=0)
    """Seconds a rotated-in key is published before it signs."""
    key_reload_interval: float = Field(default=5.0, gt=0, le=300)
    """Seconds the signing keys are kept in memory before they are read again: replicas pick
    up a rotation done elsewhere within this long."""
    registration_policy: RegistrationPolicy = "open"
    """Dynamic registration: `open`, `closed`, or `token` (needs `initial_access_token`)."""
    initial_access_token: str | None = None
    """The bearer token `/register` requires under `registration_policy = "token"`."""
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    """The largest request body any endpoint reads."""
    login_max_failures: int = Field(default=5, ge=1)
    """Failed sign-ins per account before it waits."""
    login_lockout_seconds: int = Field(default=60, ge=1)
    """The first wait after too many failed sign-ins; it doubles with further failures."""
    password_hash_time_cost: int = Field(default=3, ge=1)
    """argon2id passes over memory for each password hashed or checked (RFC 9106 §4)."""
    password_hash_memory_cost: int = Field(default=64 * 1024, ge=32)
    """KiB of memory argon2id uses for each password hashed or checked; lower only for tests
    (existing hashes keep the cost they were made with)."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses whose `X-Forwarded-*` headers are believed (comma-separated in the
    environment)."""
    offline_access: bool = False
    """Offer the `offline_access` scope: listed in the metadata, shown on the consent page
    and granted when asked for. Off, it is dropped from requests; either way a client
    registered for the `refresh_token` grant gets refresh tokens."""
    dpop_nonce: bool = False
    """Require DPoP proofs at the token endpoint to carry a nonce this server issued (RFC 9449
    §8). Nonces need no storage: every replica with the same `secret_key` accepts the others',
    and each is good for two to four minutes."""
    cimd_enabled: bool = True
    """Accept Client ID Metadata Documents (a `client_id` that is an https URL)."""
    cimd_allow_hosts: tuple[str, ...] = ()
    """Metadata-document hosts fetched even if they resolve to private addresses."""
    cimd_deny_hosts: tuple[str, ...] = ()
    """Metadata-document hosts never fetched."""
    cimd_timeout: float = Field(default=2.5, gt=0, le=30)
    """Seconds a metadata-document fetch may take in all."""
    cimd_max_bytes: int = Field(default=5 * 1024, ge=512, le=1024 * 1024)
    """The largest metadata document read."""
    trusted_idps: dict[str, str] = Field(default_factory=dict)
    """Enterprise-managed authorization: identity providers whose ID-JAGs the jwt-bearer
    grant accepts, issuer → https JWKS URL or inline JWKS (JSON in the environment)."""
    rate_limit_token: int = Field(default=3000, ge=0)
    """Token, revocation and introspection requests per minute per address (0: off); shared by
    every replica."""
    rate_limit_authorize: int = Field(default=300, ge=0)
    """Authorization requests per minute per address (0: off)."""
    rate_limit_register: int = Field(default=30, ge=0)
    """Registrations per minute per address (0: off)."""
    rate_limit_login: int = Field(default=60, ge=0)
    """Sign-in form posts per minute per address (0: off)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """The lowest level logged."""
    log_format: Literal["text", "json"] = "text"
    """`text`, or `json` for one JSON object a line."""
    metrics: bool = False
    """Prometheus metrics at `<issuer path>/metrics` (needs `mcpauth-kit[metrics]`)."""
    service_name: str = Field(default="mcpauth", min_length=1, max_length=60)
    """The name on every sign-in, consent and account page."""
    logo_url: str | None = None
    """The logo on every page: an https URL, or a path on this server."""
    accent_color: str = "#2f5bd3"
    """The pages' button and icon colour, `#rrggbb`."""
    upstream: tuple[UpstreamProvider, ...] = ()
    """OpenID Connect providers people sign in with, one `[[mcpauth.upstream]]` table each
    (a JSON array in the environment); their keys are listed below."""
    local_accounts: bool = True
    """Whether the sign-in page offers username and password (accounts made with `mcpauth
    users add`); false leaves only the upstream providers' buttons."""
    require_mfa: bool = False
    """Require two factors (a password or provider sign-in and then a passkey or an
    authenticator app's code, or a passkey that verifies the person) before any client is
    authorized; a session with one is asked for the second, and a person without any is told to
    set one up on the account page. `mcpauth resources add URI --require-mfa` asks it for one
    resource only. Token exchange and ID-JAG tokens need `mfa` in the caller's token's or the
    assertion's `amr`, and a grant made with one factor stops refreshing (docs/security.md
    T49)."""
    workloads: tuple[WorkloadRule, ...] = ()
    """Workload identity federation: which platform tokens the jwt-bearer grant accepts and the
    client each acts as, one `[[mcpauth.workloads]]` table each (a JSON array in the
    environment); their keys are listed below."""
    upstream_timeout: float = Field(default=10.0, gt=0, le=60)
    """Seconds each call to an upstream provider (its configuration, keys, token endpoint)
    may take in all."""
    outbound_proxy: str | None = None
    """An HTTP proxy, `http://host:port` (credentials as `http://user:password@host:port`),
    through which every fetch the server makes goes as a CONNECT tunnel: metadata documents,
    `jwks_uri`s, trusted issuers' keys, upstream providers. The proxy resolves the names, so it
    must refuse private addresses itself; the server still refuses address literals and local
    names (docs/security.md). `HTTPS_PROXY` and the like are never read."""
    outbound_ca_file: str | None = None
    """A PEM file of CA certificates trusted, besides the default ones, by every outbound TLS
    connection (a TLS-inspecting proxy's CA, an internal CA)."""

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return check_issuer(value)

    @field_validator("logo_url")
    @classmethod
    def _logo_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if value.startswith("https://") or (value.startswith("/") and not value.startswith("//")):
            return value
        raise ValueError("must be an https URL or a path starting with /")

    @field_validator("outbound_proxy")
    @classmethod
    def _outbound_proxy(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_proxy(value)
        return value.strip()

    @field_validator("accent_color")
    @classmethod
    def _accent_color(cls, value: str) -> str:
        if not is_colour(value):
            raise ValueError("must be a colour written #rrggbb")
        return value.lower()

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: tuple[UpstreamProvider, ...]) -> tuple[UpstreamProvider, ...]:
        ids = [provider.id for provider in value]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"two providers with the id {twice[0]!r}")
        return value

    @model_validator(mode="after")
    def _someone_can_sign_in(self) -> Settings:
        if not self.local_accounts and not self.upstream:
            raise ValueError("local_accounts = false needs at least one upstream provider")
        return self

    @property
    def is_https(self) -> bool:
        return self.issuer.startswith("https://")

    def endpoint_url(self, name: str) -> str:
        """The URL of the endpoint ``name`` (``token``, ``interaction/ID``...) below the issuer."""
        return f"{self.issuer.rstrip('/')}/{name}"


def _coerce_env(name: str, value: str) -> Any:
    """An environment variable's text as the setting's type asks for it: a tuple from a
    comma-separated list, a table from JSON; everything else (numbers, booleans such as
    ``true``/``1``/``off``) is left to the model's own validation."""
    annotation = Settings.model_fields[name].annotation
    shape = get_origin(annotation)
    items = get_args(annotation)
    if shape is tuple and items and isinstance(items[0], type) and issubclass(items[0], BaseModel):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ConfigurationError(f"{ENV_PREFIX}{name.upper()} must be a JSON array") from exc
    if shape is dict:
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ConfigurationError(f"{ENV_PREFIX}{name.upper()} must be a JSON object") from exc
    if shape is tuple:
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name in Settings.model_fields:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = _coerce_env(name, raw)
    return values


def from_toml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read config file {path}: {exc}") from exc
    section = data.get("mcpauth", data)
    if not isinstance(section, dict):
        raise ConfigurationError(f"{path}: expected a table of settings")
    return section


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge settings: flags > ``MCPAUTH_*`` environment > TOML file > defaults.

    Raises:
        ConfigurationError: a value is invalid; the message names the setting.
    """
    environ = os.environ if environ is None else environ
    config_file = config_file or environ.get(ENV_PREFIX + "CONFIG") or None
    merged: dict[str, Any] = {}
    if config_file:
        merged.update(from_toml(config_file))
    merged.update(from_environment(environ))
    merged.update({k: v for k, v in (flags or {}).items() if v is not None})
    try:
        return Settings(**merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        raise ConfigurationError(f"{where}: {first['msg']}") from exc


def _default(name: str, model: type[BaseModel] = Settings) -> str:
    field = model.model_fields[name]
    if field.default_factory is not None:
        return "per-user data directory" if name == "database_url" else "(empty)"
    value = field.default
    if field.is_required():
        return "required"
    if value is None or value == () or value == {}:
        return "(unset)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "`" + " ".join(value) + "`"
    return f"`{value}`"


def _meaning(field: Any) -> str:
    return " ".join((field.description or "").split()).replace("|", "\\|")


def reference() -> str:
    """The configuration reference in Markdown, generated from :class:`Settings`."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `mcpauth.server.Settings` by `mcpauth.server.config.reference()`; a test",
        "(`tests/test_configuration_reference.py`) keeps it in sync. Each setting comes from a",
        "flag of `mcpauth serve` where there is one,",
        "else the environment variable, else the TOML file (`--config FILE` or `MCPAUTH_CONFIG`;",
        "keys at the top level or under `[mcpauth]`), else the default.",
        "",
        "| setting | environment | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in Settings.model_fields.items():
        env = ENV_PREFIX + name.upper()
        lines.append(f"| `{name}` | `{env}` | {_default(name)} | {_meaning(field)} |")
    lines += [
        "",
        "## Upstream identity providers",
        "",
        "Each `[[mcpauth.upstream]]` table (each object of the `MCPAUTH_UPSTREAM` JSON array)",
        "has these keys:",
        "",
        "| key | default | meaning |",
        "| --- | --- | --- |",
    ]
    for name, field in UpstreamProvider.model_fields.items():
        default = _default(name, UpstreamProvider)
        lines.append(f"| `{name}` | {default} | {_meaning(field)} |")
    lines += [
        "",
        "## Workloads",
        "",
        "Each `[[mcpauth.workloads]]` table (each object of the `MCPAUTH_WORKLOADS` JSON array)",
        "has these keys:",
        "",
        "| key | default | meaning |",
        "| --- | --- | --- |",
    ]
    for name, field in WorkloadRule.model_fields.items():
        lines.append(f"| `{name}` | {_default(name, WorkloadRule)} | {_meaning(field)} |")
    return "\n".join([*lines, *_RESOURCE_SIDE]) + "\n"


# Not settings of this server (it reads none of them), but looked up on the same page: what
# replicas of a protected resource share (docs/api/proxy.md, docs/api/middleware.md).
_RESOURCE_SIDE = [
    "",
    "## Protected resources: `mcpauth proxy` and the middleware",
    "",
    "Replicas of one resource behind a load balancer share state (rate counts, tool-call buckets)",
    "through Redis only when given one (docs/deploy.md, docs/security.md T30, T44); the other",
    "proxy options are in [api/proxy.md](api/proxy.md), the middleware's in",
    "[api/middleware.md](api/middleware.md).",
    "",
    "| `mcpauth proxy` | environment | middleware | default | meaning |",
    "| --- | --- | --- | --- | --- |",
    "| `--shared-state URL` | `MCPAUTH_PROXY_SHARED_STATE` | `shared_state=SharedState(url)` | "
    "(unset) | `redis://` or `rediss://` URL of the Redis server the replicas share DPoP "
    "proofs' single use, rate counts and (middleware with introspection) token verdicts "
    "through; extra `shared-state`. Unset: each process keeps its own. |",
    "| `--shared-state-timeout S` | | `SharedState(url, timeout=S)` | `0.25` | The longest "
    "one Redis call may take; past it, or with Redis down, what needs Redis gets 503 with "
    "`Retry-After`. |",
    "| `--rate-limit N` | | `Limits(rate_limit=N)` | (no limit) | Requests per caller (its "
    "token's issuer, subject and client) in a window; one more gets 429 with `Retry-After`. |",
    "| `--rate-window S` | | `Limits(rate_window=S)` | `60` | The window, from a caller's "
    "first request. |",
    "| `--user-rate-limit RATE` | | `Limits(user_rate=Rate(...))` | (no limit) | `tools/call` "
    "requests per user (issuer and subject), all tools together: a token bucket, "
    "`CALLS/[N]UNIT[:BURST]` (`60/min`, `1000/h:50`); one more gets 429 with `Retry-After` "
    "and a JSON-RPC error. |",
    "| `--tool-rate-limit TOOL=RATE` | | `Limits(tool_rates={TOOL: Rate(...)})` | (no limit) | "
    "Calls of one tool per user (`*` for every tool not named); repeatable. |",
    "| `--policy FILE.cedar` | | `tool_policy=CedarPolicy.from_file(FILE)` | (none) | Cedar "
    "policies deciding each `tools/call` and hiding the tools they deny in `tools/list`; "
    "extra `policy`. A file that does not parse stops start-up with its line and column. |",
    "| `--groups-claim CLAIM` | | `CedarPolicy(..., groups_claim=CLAIM)` | `groups` | The "
    'token claim with the caller\'s groups (`Group::"<name>"` parents in the policy). |',
]
