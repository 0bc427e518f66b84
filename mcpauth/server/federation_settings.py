"""The settings of federation: the upstream providers people sign in with
(``[[mcpauth.upstream]]``: OpenID Connect, GitHub, or any other OAuth 2.0 provider) and the
workload platforms whose tokens the jwt-bearer grant accepts (``[[mcpauth.workloads]]``); part
of :class:`~mcpauth.server.config.Settings`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from mcpauth.errors import ConfigurationError
from mcpauth.oauth import SCOPE_TOKEN
from mcpauth.uris import URIError, canonical_resource, check_endpoint, check_issuer

_PROVIDER_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_FIELD_PATH = re.compile(r"^[A-Za-z0-9_:-]{1,64}(\.[A-Za-z0-9_:-]{1,64}){0,4}$")
GITHUB = "https://github.com"
GITHUB_API = "https://api.github.com"
GITHUB_SCOPES = ("read:user", "user:email")
CLAIM_FIELDS = {
    "subject": "sub",
    "email": "email",
    "email_verified": "email_verified",
    "name": "name",
    "groups": "groups",
}
# parameters of the authorization request that mcpauth itself sets (or must never be sent)
RESERVED_PARAMETERS = frozenset(
    {
        "response_type", "client_id", "redirect_uri", "scope", "state", "nonce",
        "code_challenge", "code_challenge_method", "request", "request_uri", "response_mode",
    }
)  # fmt: skip
ProviderKind = Literal["oidc", "github", "oauth2"]


class UpstreamProvider(BaseModel):
    """A provider people sign in with (``[[mcpauth.upstream]]`` in TOML): an OpenID Connect
    provider (``kind = "oidc"``), GitHub (``"github"``) or another plain OAuth 2.0 provider
    whose user API says who signed in (``"oauth2"``). Its client secret is never a setting:
    only the name of the environment variable or the path of the file that holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    id: str
    """Short name in URLs: the redirect URI to register is `<issuer>/upstream/<id>/callback`."""
    name: str = Field(min_length=1, max_length=60)
    """The provider's name on its sign-in button ("Continue with" and this name)."""
    kind: ProviderKind = "oidc"
    """`oidc`: an OpenID Connect provider (discovery, ID token); `github`: GitHub or GitHub
    Enterprise Server (the user from its user API, the verified primary email from its emails
    API); `oauth2`: another OAuth 2.0 provider, its endpoints and `claim_mapping` configured."""
    issuer: str = Field(max_length=120)
    """The provider's issuer URL (at most 120 characters); accounts are keyed by it and the
    provider's subject. `oidc`: its OpenID configuration is read from
    `<issuer>/.well-known/openid-configuration` and must name exactly this issuer; `github`:
    `https://github.com` by default, a GitHub Enterprise Server's own URL; `oauth2`: required,
    the provider's issuer identifier if it has one (compared with RFC 9207 `iss`), never
    fetched."""
    authorization_endpoint: str | None = None
    """`oauth2` (required) and `github` (derived from `issuer`): where browsers are sent."""
    token_endpoint: str | None = None
    """`oauth2` (required) and `github` (derived from `issuer`): where codes are redeemed and
    kept tokens refreshed."""
    userinfo_endpoint: str | None = None
    """`oauth2` (required) and `github` (`https://api.github.com/user`, or
    `<issuer>/api/v3/user`): the user API read with the access token; GitHub's emails are read
    at this URL + `/emails`."""
    claim_mapping: dict[str, str] = Field(default_factory=dict)
    """`oauth2` only: which fields of the user API's answer are the `subject` (a stable id,
    never an email), `email`, `email_verified`, `name` and `groups` (dotted paths for nested
    fields); by default `sub`, `email`, `email_verified`, `name` and `groups`. Without
    `email_verified` an email counts as unverified."""
    authorization_params: dict[str, str] = Field(default_factory=dict)
    """Extra parameters of the authorization request (Google's `access_type = "offline"`,
    GitHub's `allow_signup = "false"`); those mcpauth sets itself are refused."""
    client_id: str = Field(min_length=1, max_length=255)
    """mcpauth's client id at the provider."""
    client_secret_env: str | None = None
    """The environment variable holding the client secret."""
    client_secret_file: str | None = None
    """The file holding the client secret (surrounding whitespace ignored)."""
    token_endpoint_auth_method: (
        Literal["client_secret_basic", "client_secret_post", "none"] | None
    ) = None
    """How mcpauth authenticates at the token endpoint; `client_secret_basic` when there is a
    secret, else `none` (PKCE only)."""
    scopes: tuple[str, ...] = ("openid", "email", "profile")
    """The scopes asked for; `oidc`: `openid` is required; `github`: `read:user user:email`
    by default; `oauth2`: none unless set."""
    allowed_email_domains: tuple[str, ...] = ()
    """When set, only people whose verified email (`email_verified` true) is in one of these
    domains may sign in."""
    keep_tokens: bool = False
    """Keep the provider's access and refresh tokens of each person who signs in (encrypted at
    rest with a key derived from `secret_key`), refreshed when they expire and deleted when the
    person revokes an application on `/account` or the account is removed, so that resources
    listed in `release_to` can get them by token exchange to call the provider's APIs."""
    release_to: tuple[str, ...] = ()
    """The resources (canonical URIs) whose MCP servers may exchange a caller's token for the
    caller's token at this provider (RFC 8693, `audience` = this provider's `id`)."""
    required_claims: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Claims the ID token must carry: claim name → accepted values (a string claim equal to
    one of them, or a list claim containing one)."""

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _PROVIDER_ID.match(value):
            raise ValueError(
                "must be 1 to 32 of a-z, 0-9, - and _, starting with a letter or digit"
            )
        return value

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        try:
            return check_issuer(value)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from exc

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        """The defaults of a kind: GitHub's endpoints from its issuer, each kind's scopes."""
        if not isinstance(data, dict) or data.get("kind") not in ("github", "oauth2"):
            return data
        data = dict(data)
        if data["kind"] == "oauth2":
            data.setdefault("scopes", ())
            return data
        data.setdefault("scopes", GITHUB_SCOPES)
        issuer = data.setdefault("issuer", GITHUB)
        if isinstance(issuer, str):
            base = issuer.rstrip("/")
            api = GITHUB_API if base == GITHUB else f"{base}/api/v3"
            data.setdefault("authorization_endpoint", f"{base}/login/oauth/authorize")
            data.setdefault("token_endpoint", f"{base}/login/oauth/access_token")
            data.setdefault("userinfo_endpoint", f"{api}/user")
        return data

    @field_validator("authorization_endpoint", "token_endpoint", "userinfo_endpoint")
    @classmethod
    def _endpoints(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else check_endpoint(value, str(info.field_name))

    @field_validator("claim_mapping")
    @classmethod
    def _claim_mapping(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(CLAIM_FIELDS))
        if unknown:
            raise ValueError(f"unknown claim {unknown[0]!r}: map {', '.join(CLAIM_FIELDS)}")
        bad = [path for path in value.values() if not _FIELD_PATH.match(path)]
        if bad:
            raise ValueError(f"not a field name or dotted path: {bad[0]!r}")
        return value

    @field_validator("authorization_params")
    @classmethod
    def _authorization_params(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = sorted(set(value) & RESERVED_PARAMETERS)
        if reserved:
            raise ValueError(f"{reserved[0]} is set by mcpauth")
        if len(value) > 10 or any(len(k) > 64 or len(v) > 200 for k, v in value.items()):
            raise ValueError("at most 10 parameters, names of 64 and values of 200 characters")
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [scope for scope in value if not SCOPE_TOKEN.match(scope)]
        if bad:
            raise ValueError(f"not a scope: {bad[0]!r}")
        return tuple(dict.fromkeys(value))

    @field_validator("allowed_email_domains")
    @classmethod
    def _domains(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        domains = tuple(domain.strip().lower().removeprefix("@") for domain in value)
        bad = [domain for domain in domains if not _DOMAIN.match(domain)]
        if bad:
            raise ValueError(f"not a domain name: {bad[0]!r}")
        return domains

    @field_validator("required_claims", mode="before")
    @classmethod
    def _required_claims(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (v,) if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator("release_to")
    @classmethod
    def _release_to(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        try:
            return tuple(canonical_resource(uri) for uri in value)
        except URIError as exc:
            raise ValueError(f"release_to: {exc}") from exc

    @model_validator(mode="after")
    def _kind(self) -> UpstreamProvider:
        endpoints = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint")
        if self.kind == "oidc":
            if "openid" not in self.scopes:
                raise ValueError("scopes must include openid")
            given = [name for name in endpoints if getattr(self, name) is not None]
            if given:
                raise ValueError(f"{given[0]} is for kind oauth2: OpenID discovery gives it")
        else:
            missing = [name for name in endpoints if getattr(self, name) is None]
            if missing:
                raise ValueError(f"kind {self.kind} needs {missing[0]}")
        if self.claim_mapping and self.kind != "oauth2":
            raise ValueError("claim_mapping is for kind oauth2")
        return self

    @model_validator(mode="after")
    def _secret_source(self) -> UpstreamProvider:
        if self.client_secret_env and self.client_secret_file:
            raise ValueError("give client_secret_env or client_secret_file, not both")
        has_secret = bool(self.client_secret_env or self.client_secret_file)
        if self.token_endpoint_auth_method not in (None, "none") and not has_secret:
            raise ValueError(f"{self.token_endpoint_auth_method} needs a client secret")
        if self.release_to and not self.keep_tokens:
            raise ValueError("release_to needs keep_tokens = true")
        if self.token_endpoint_auth_method == "none" and has_secret:
            raise ValueError("token_endpoint_auth_method none takes no client secret")
        return self

    @property
    def auth_method(self) -> str:
        """The token endpoint authentication method in effect."""
        if self.token_endpoint_auth_method is not None:
            return self.token_endpoint_auth_method
        if not (self.client_secret_env or self.client_secret_file):
            return "none"
        # GitHub documents the secret as a form parameter of its token request
        return "client_secret_post" if self.kind == "github" else "client_secret_basic"

    @property
    def is_openid(self) -> bool:
        """Whether sign-in proves who it is with an ID token (else with the user API)."""
        return self.kind == "oidc"

    def claim_field(self, claim: str) -> str:
        """The user API's field (dotted path) holding ``claim`` (`oauth2`)."""
        return self.claim_mapping.get(claim, CLAIM_FIELDS[claim])

    def client_secret(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The client secret from its environment variable or file (None: a public client).

        Raises:
            ConfigurationError: the variable is unset or empty, or the file cannot be read.
        """
        where = f"upstream {self.id!r}"
        if self.client_secret_env:
            secret = (os.environ if environ is None else environ).get(self.client_secret_env)
            if not secret:
                raise ConfigurationError(f"{where}: {self.client_secret_env} is not set")
            return secret
        if self.client_secret_file:
            try:
                secret = Path(self.client_secret_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigurationError(
                    f"{where}: cannot read client_secret_file {self.client_secret_file}"
                ) from exc
            if not secret:
                raise ConfigurationError(f"{where}: {self.client_secret_file} is empty")
            return secret
        return None


class WorkloadRule(BaseModel):
    """A workload allowed to get tokens with its own identity token (``[[mcpauth.workloads]]`` in
    TOML): the jwt-bearer grant (RFC 7523) with, as the assertion, a token its platform issued
    (a Kubernetes service-account token, a CI provider's OIDC token), for the client it names."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    issuer: str = Field(min_length=1, max_length=255)
    """The platform's token issuer (`iss`), exactly."""
    jwks: str = Field(min_length=1)
    """The issuer's keys: an https JWKS URL, or the JWKS itself as JSON."""
    subject: str = Field(min_length=1, max_length=255)
    """The token's `sub`, exactly, or a prefix ending in `*`
    (`system:serviceaccount:ci:*`)."""
    client_id: str = Field(min_length=1, max_length=255)
    """The registered client the workload acts as (registered with the jwt-bearer grant and
    `token_endpoint_auth_method` `none`: the token is its credential)."""
    audience: str | None = None
    """The `aud` the token must carry; when unset, this server's issuer or its token endpoint."""

    def matches(self, issuer: str, subject: str) -> bool:
        if issuer != self.issuer:
            return False
        if self.subject.endswith("*"):
            return subject.startswith(self.subject[:-1])
        return subject == self.subject
