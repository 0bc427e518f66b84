"""The grant :class:`~mcpauth.client.OAuth` runs and the policy around it, as frozen values.

A grant says how a token is obtained and which scopes to ask for:

- :class:`AuthorizationCodeGrant`: a person signs in through a browser (OAuth 2.1 §4.1, PKCE);
- :class:`DeviceCodeGrant`: a person approves on another device, typing the code this program
  shows (RFC 8628: no browser or listener needed here);
- :class:`ClientCredentialsGrant`: a program acts for itself (OAuth 2.1 §4.2; needs
  pre-registered :class:`~mcpauth.client.ClientCredentials`);
- :class:`JWTBearerGrant`: enterprise-managed authorization, trading the user's assertion from the
  company's identity provider for an ID-JAG (RFC 7523 §2.1; needs credentials too);
- :class:`WorkloadIdentityGrant`: a workload presents its platform's token (RFC 7523 §2.1,
  workload identity federation; no secret).

:class:`Policy` holds the few choices around any grant: when to refresh, how often to retry a
request, which authorization server to use when a resource lists several, the clock, and DPoP.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from mcpauth.client.compatibility import ServerCompatibility
from mcpauth.client.device import DeviceAuthorization, print_user_code
from mcpauth.client.discovery import ServerSelector, first_server
from mcpauth.client.enterprise import IdentityAssertion

GrantName = Literal[
    "authorization_code", "device_code", "client_credentials", "jwt_bearer", "workload"
]


def _scopes(value: Iterable[str]) -> tuple[str, ...]:
    """Any sequence of scope names, kept as a tuple so that the grant stays immutable."""
    if isinstance(value, str):
        raise TypeError("scopes is a sequence of scope names, not one string")
    return tuple(value)


@dataclass(frozen=True)
class AuthorizationCodeGrant:
    """A person signs in through a browser: authorization code with PKCE S256 and ``resource``.

    ``scopes`` are asked for before any challenge names some; after that the server's challenge
    and its metadata decide (MCP "Scope Selection Strategy"). ``offline_access`` adds the
    ``offline_access`` scope when the authorization server lists it, to get a refresh token.
    """

    name: ClassVar[GrantName] = "authorization_code"
    scopes: Sequence[str] = ()
    offline_access: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", _scopes(self.scopes))


@dataclass(frozen=True)
class DeviceCodeGrant:
    """A person approves on another device (RFC 8628): the program shows a URL and a code,
    the person opens the URL anywhere, types the code, signs in and approves, while the
    program polls. ``show`` is called with the
    :class:`~mcpauth.client.device.DeviceAuthorization` to show (default: two lines on
    stderr); ``timeout`` bounds the wait below the code's own lifetime. ``scopes`` and
    ``offline_access`` as for :class:`AuthorizationCodeGrant`.
    """

    name: ClassVar[GrantName] = "device_code"
    scopes: Sequence[str] = ()
    offline_access: bool = True
    show: Callable[[DeviceAuthorization], None] = field(default=print_user_code, repr=False)
    timeout: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", _scopes(self.scopes))
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("timeout must be positive")


@dataclass(frozen=True)
class ClientCredentialsGrant:
    """A program acts for itself with pre-registered credentials; no person, no browser."""

    name: ClassVar[GrantName] = "client_credentials"
    scopes: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", _scopes(self.scopes))


@dataclass(frozen=True)
class JWTBearerGrant:
    """Enterprise-managed authorization: ``identity`` is traded at the identity provider for an
    ID-JAG, which the MCP authorization server redeems for an access token."""

    name: ClassVar[GrantName] = "jwt_bearer"
    identity: IdentityAssertion
    scopes: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", _scopes(self.scopes))


@dataclass(frozen=True)
class WorkloadIdentityGrant:
    """Workload identity federation (RFC 7523 §2.1, MCP SEP-1933): the token the workload's
    platform issued (a Kubernetes service-account token, a CI provider's OIDC token) is the
    assertion of a jwt-bearer grant; no client secret. Give the token itself (``token``), the
    file the platform keeps it in (``token_file``, read again for each request: platforms
    rotate it) or the environment variable that holds it (``token_env``)."""

    name: ClassVar[GrantName] = "workload"
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    token_env: str | None = None
    scopes: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", _scopes(self.scopes))
        given = [v for v in (self.token, self.token_file, self.token_env) if v]
        if len(given) != 1:
            raise ValueError("give exactly one of token, token_file and token_env")

    def read(self) -> str:
        """The platform token now.

        Raises:
            ValueError: the file or variable is missing or empty.
        """
        if self.token:
            return self.token
        if self.token_file:
            try:
                value = Path(self.token_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(f"cannot read the workload token file: {exc}") from exc
        else:
            value = os.environ.get(self.token_env or "", "").strip()
        if not value:
            raise ValueError("the workload token is empty")
        return value


Grant = (
    AuthorizationCodeGrant
    | DeviceCodeGrant
    | ClientCredentialsGrant
    | JWTBearerGrant
    | WorkloadIdentityGrant
)
"""Any of the five grants."""
PERSON_GRANTS = (AuthorizationCodeGrant, DeviceCodeGrant)  # a person must act: never silent


@dataclass(frozen=True)
class Policy:
    """How the flow behaves around its grant.

    ``refresh_margin``: seconds before expiry at which tokens are renewed ahead of use.
    ``max_attempts``: how many times one request is retried after a 401 or a step-up 403.
    ``select_server``: picks the issuer when the resource lists several (default: the first).
    ``clock``: seconds since the epoch; tests pass a fake one.
    ``dpop``: ``"auto"`` binds tokens to a DPoP key (RFC 9449) whenever the authorization
    server offers it (``dpop_signing_alg_values_supported``), ``"required"`` refuses a server
    that does not, ``"off"`` never does.
    ``compatibility``: how to send ``resource`` and scopes to an authorization server that
    departs from MCP (:class:`~mcpauth.client.compatibility.ServerCompatibility`, e.g.
    ``ServerCompatibility.entra_id(...)``); the default sends them as MCP asks.
    """

    refresh_margin: float = 60.0
    max_attempts: int = 3
    select_server: ServerSelector = field(default=first_server)
    clock: Callable[[], float] = field(default=time.time)
    dpop: Literal["auto", "required", "off"] = "auto"
    compatibility: ServerCompatibility = field(default_factory=ServerCompatibility)

    def __post_init__(self) -> None:
        if self.refresh_margin < 0:
            raise ValueError("refresh_margin must not be negative")
        if self.max_attempts < 0:
            raise ValueError("max_attempts must not be negative")
        if self.dpop not in ("auto", "required", "off"):
            raise ValueError("dpop must be 'auto', 'required' or 'off'")
