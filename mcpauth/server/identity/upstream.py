"""Upstream providers, the client side (Authlib's client, over httpx2): each OpenID provider's
configuration from OpenID discovery, cached, and its signing keys, kept in the one key-set cache
(:mod:`mcpauth.key_sets`); the authorization request
with ``state``, ``nonce`` and PKCE (S256); the code exchanged at the token endpoint for an ID
token that :mod:`~mcpauth.server.identity.id_tokens` validates. A plain OAuth 2.0 provider
(GitHub, or ``kind = "oauth2"``) has its endpoints configured, gets no ``nonce`` and proves who
signed in through its user API (:mod:`~mcpauth.server.identity.user_apis`). Every call to a
provider has a deadline (``upstream_timeout``) and a response-size cap, follows no redirect and
runs on the event loop. The PKCE verifier and the nonce are derived from the state with a
server key, so a pending sign-in stores nothing that would let anyone finish it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import httpx2

from mcpauth.caching import ExpiringCache, wall_clock
from mcpauth.errors import FetchError, TemporarilyUnavailable
from mcpauth.key_sets import Fetched, KeySetCache, KeySetPolicy
from mcpauth.oauth import format_scope
from mcpauth.server.config import UpstreamProvider
from mcpauth.server.identity import user_apis
from mcpauth.server.identity.id_tokens import (
    IDTokenError,
    ProviderKeys,
    UnknownSigningKey,
    allowed_algorithms,
    signing_keys,
    validate_id_token,
)
from mcpauth.server.identity.upstream_http import (
    MAX_RESPONSE_BYTES,
    CappedTransport,
    ProfileError,
    UpstreamRefused,
    UpstreamUnavailable,
    error_code,
    reason,
)
from mcpauth.server.outbound import Outbound
from mcpauth.uris import URIError, check_endpoint

if TYPE_CHECKING:  # Authlib is imported by the calls that use it: a server without providers
    from authlib.integrations.httpx_client import AsyncOAuth2Client  # never loads it

__all__ = [
    "CappedTransport",
    "ProfileError",
    "Provider",
    "ProviderMetadata",
    "UpstreamProviders",
    "UpstreamRefused",
    "UpstreamUnavailable",
]

log = logging.getLogger("mcpauth.upstream")

METADATA_SECONDS = 3600
KEYS_UNAVAILABLE = "The provider's signing keys cannot be loaded right now"


def _endpoint(document: Mapping[str, Any], name: str) -> str:
    try:
        return check_endpoint(document.get(name, ""), name)
    except URIError:
        raise UpstreamUnavailable(f"metadata_{name}") from None


@dataclass(frozen=True)
class ProviderMetadata:
    """What mcpauth uses of a provider's OpenID configuration (or a plain OAuth 2.0
    provider's configured endpoints)."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    algorithms: tuple[str, ...]
    iss_parameter_supported: bool  # RFC 9207: the callback must then carry ``iss``
    openid: bool = True  # an ID token proves who signed in (else the user API)

    @classmethod
    def configured(cls, config: UpstreamProvider) -> ProviderMetadata:
        """A plain OAuth 2.0 provider's endpoints, from its settings (nothing is fetched)."""
        assert config.authorization_endpoint is not None
        assert config.token_endpoint is not None
        return cls(
            issuer=config.issuer,
            authorization_endpoint=config.authorization_endpoint,
            token_endpoint=config.token_endpoint,
            jwks_uri="",
            algorithms=(),
            iss_parameter_supported=False,
            openid=False,
        )

    @classmethod
    def parse(cls, document: Mapping[str, Any], issuer: str) -> ProviderMetadata:
        """The configuration of ``issuer``, which it must name exactly (OpenID Connect
        Discovery §4.3).

        Raises:
            UpstreamUnavailable: a required member is missing or unusable.
        """
        if document.get("issuer") != issuer:
            raise UpstreamUnavailable("metadata_issuer_mismatch")
        methods = document.get("code_challenge_methods_supported")
        if isinstance(methods, list) and "S256" not in methods:
            raise UpstreamUnavailable("metadata_no_s256")
        algorithms = allowed_algorithms(
            _strings(document.get("id_token_signing_alg_values_supported"))
        )
        if not algorithms:
            raise UpstreamUnavailable("metadata_no_asymmetric_algorithm")
        return cls(
            issuer=issuer,
            authorization_endpoint=_endpoint(document, "authorization_endpoint"),
            token_endpoint=_endpoint(document, "token_endpoint"),
            jwks_uri=_endpoint(document, "jwks_uri"),
            algorithms=tuple(algorithms),
            iss_parameter_supported=document.get("authorization_response_iss_parameter_supported")
            is True,
        )


def _strings(value: object) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


class Provider:
    """A configured provider; its client secret is read when first needed (``serve`` reads
    every one at startup) and never logged."""

    def __init__(self, config: UpstreamProvider, environ: Mapping[str, str] | None) -> None:
        self.config = config
        self._environ = environ
        self._secret: str | None = None

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def name(self) -> str:
        return self.config.name

    def secret(self) -> str | None:
        """Raises:
        ConfigurationError: the secret's variable is unset or its file unreadable.
        """
        if self._secret is None:
            self._secret = self.config.client_secret(self._environ)
        return self._secret

    def __repr__(self) -> str:
        return f"Provider(id={self.id!r}, issuer={self.config.issuer!r})"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class UpstreamProviders:
    """Every configured provider, and the calls mcpauth makes to them."""

    def __init__(
        self,
        configured: Sequence[UpstreamProvider],
        *,
        key: bytes,
        timeout: float,
        environ: Mapping[str, str] | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        outbound: Outbound | None = None,
        clock: Callable[[], float] = wall_clock,
    ) -> None:
        self._providers = {config.id: Provider(config, environ) for config in configured}
        self._key = key
        self.timeout = timeout
        self.transport = transport  # tests put a stand-in for the network here
        self.outbound = outbound  # the operator's proxy and trust store (None: the defaults)
        entries = max(16, len(configured))
        self._metadata: ExpiringCache[str, ProviderMetadata] = ExpiringCache(
            METADATA_SECONDS, max_entries=entries, clock=clock, keep_stale=True
        )
        # the server's defaults (kept at most five minutes, an unknown kid refetching at most
        # once a minute), a person's sign-in backed off no longer than a minute
        policy = KeySetPolicy(
            KEYS_UNAVAILABLE, backoff=1.0, max_backoff=60.0, deadline=timeout, max_sources=entries
        )
        self._keys = KeySetCache(
            self._fetch_keys, _provider_keys, policy, clock=clock, name="upstream provider keys"
        )

    def __iter__(self) -> Iterator[Provider]:
        return iter(self._providers.values())

    def __len__(self) -> int:
        return len(self._providers)

    def get(self, provider_id: str) -> Provider | None:
        return self._providers.get(provider_id)

    def check_secrets(self) -> None:
        """Read every provider's client secret now.

        Raises:
            ConfigurationError: one is missing.
        """
        for provider in self:
            provider.secret()

    def pkce_verifier(self, state: str) -> str:
        """The PKCE code verifier of the sign-in with ``state`` (RFC 7636 §4.1: 43 characters)."""
        return _b64(hmac.new(self._key, f"pkce {state}".encode(), hashlib.sha256).digest())

    def nonce(self, state: str) -> str:
        return _b64(hmac.new(self._key, f"nonce {state}".encode(), hashlib.sha256).digest())

    def _connection(self) -> dict[str, Any]:
        """What every client mcpauth opens to a provider has: the deadline, no redirects, no
        proxy from the environment, the capped transport on the operator's route."""
        inner = self.transport or (
            self.outbound.httpx2_transport()
            if self.outbound
            else httpx2.AsyncHTTPTransport(retries=0, trust_env=False)
        )
        return {
            "timeout": httpx2.Timeout(self.timeout),
            "follow_redirects": False,
            "trust_env": False,
            "transport": CappedTransport(inner, MAX_RESPONSE_BYTES),
            "headers": {"Accept-Encoding": "identity", "User-Agent": "mcpauth"},
        }

    def _client(self, provider: Provider, *, authenticated: bool = False) -> AsyncOAuth2Client:
        """Authlib's client for one exchange with ``provider`` (its secret only when
        ``authenticated``: the token endpoint)."""
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        return AsyncOAuth2Client(
            client_id=provider.config.client_id,
            client_secret=provider.secret() if authenticated else None,
            token_endpoint_auth_method=provider.config.auth_method,
            scope=format_scope(provider.config.scopes),
            code_challenge_method="S256",
            **self._connection(),
        )

    async def _get_json(self, url: str) -> tuple[dict[str, Any], httpx2.Headers]:
        """A provider's JSON document (its configuration, its JWKS) and the response headers.

        Raises:
            UpstreamUnavailable: not 200, or not a JSON object.
            httpx2.HTTPError: the request failed.
        """
        async with httpx2.AsyncClient(**self._connection()) as client:
            response = await client.get(url, headers={"Accept": "application/json"})
        if response.status_code != 200:
            raise UpstreamUnavailable(f"http_{response.status_code}")
        try:
            document = response.json()
        except ValueError as exc:
            raise UpstreamUnavailable("not_json") from exc
        if not isinstance(document, dict):
            raise UpstreamUnavailable("not_json")
        return document, response.headers

    async def metadata(self, provider: Provider) -> ProviderMetadata:
        """The provider's configuration (cached an hour; the last good one while it cannot be
        fetched); a plain OAuth 2.0 provider's from its settings.

        Raises:
            UpstreamUnavailable: none could be had in time.
        """
        if not provider.config.is_openid:
            return ProviderMetadata.configured(provider.config)
        cached = self._metadata.get(provider.id)
        if cached is not None:
            return cached
        issuer = provider.config.issuer
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            with anyio.fail_after(self.timeout):
                found = ProviderMetadata.parse((await self._get_json(url))[0], issuer)
        except (UpstreamUnavailable, TimeoutError, httpx2.HTTPError) as exc:
            stale = self._metadata.get_stale(provider.id)
            why = reason(exc)
            log.warning("upstream %s: configuration not loaded (%s)", provider.id, why)
            if stale is not None:
                return stale[0]
            raise UpstreamUnavailable(why) from exc
        self._metadata.put(provider.id, found)
        return found

    async def _fetch_keys(self, url: str, requester: str) -> Fetched:
        try:
            document, headers = await self._get_json(url)
        except (UpstreamUnavailable, httpx2.HTTPError) as exc:
            raise FetchError(reason(exc)) from exc
        return Fetched(document, headers)

    async def _signing_keys(
        self, metadata: ProviderMetadata, *, refresh: bool = False
    ) -> ProviderKeys | None:
        """The provider's keys (refetched because a token named a ``kid`` they lack, when
        ``refresh``: None if they were fetched less than a minute ago).

        Raises:
            UpstreamUnavailable: there are none and none could be fetched.
        """
        try:
            if refresh:
                return await self._keys.refresh(metadata.jwks_uri)
            return await self._keys.get(metadata.jwks_uri)
        except TemporarilyUnavailable as exc:  # the failure itself is logged by the cache
            cause = exc.__cause__
            raise UpstreamUnavailable(reason(cause) if cause else "keys_unavailable") from exc

    def authorization_url(
        self,
        provider: Provider,
        metadata: ProviderMetadata,
        *,
        redirect_uri: str,
        state: str,
        prompt: str | None = None,
    ) -> str:
        """Where to send the browser: an authorization code request with PKCE, and a nonce
        for an OpenID provider (``prompt`` too: a plain OAuth 2.0 provider gets the configured
        parameters only)."""
        from authlib.oauth2.client import OAuth2Client

        extra = dict(provider.config.authorization_params)
        if metadata.openid:
            extra["nonce"] = self.nonce(state)
            if prompt:
                extra["prompt"] = " ".join(
                    dict.fromkeys([prompt, *extra.get("prompt", "").split()])
                )
        client = OAuth2Client(  # Authlib's sans-I/O client: no connection is made here
            None,
            client_id=provider.config.client_id,
            scope=format_scope(provider.config.scopes),
            code_challenge_method="S256",
        )
        url, _ = client.create_authorization_url(
            metadata.authorization_endpoint,
            state=state,
            code_verifier=self.pkce_verifier(state),
            redirect_uri=redirect_uri,
            **extra,
        )
        return str(url)

    async def redeem(
        self,
        provider: Provider,
        metadata: ProviderMetadata,
        *,
        code: str,
        state: str,
        redirect_uri: str,
        now: int,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The validated ID token claims for an authorization code (from a plain OAuth 2.0
        provider: its user API's, shaped alike), and the token response they came in, within
        one deadline for the token request and the keys or the user API.

        Raises:
            UpstreamUnavailable: the provider is down, slow or answered nonsense.
            UpstreamRefused: its token endpoint refused the code.
            IDTokenError: there is no valid ID token.
            ProfileError: the user API named no one.
        """
        try:
            with anyio.fail_after(self.timeout):
                token = await self._token(
                    provider,
                    metadata.token_endpoint,
                    "authorization_code",
                    code=code,
                    redirect_uri=redirect_uri,
                    code_verifier=self.pkce_verifier(state),
                )
                if not metadata.openid:
                    access = token.get("access_token")
                    if not isinstance(access, str) or not access:
                        raise UpstreamUnavailable("token_no_access_token")
                    async with self._client(provider) as client:
                        return await user_apis.who(client, provider.config, access), token
                id_token = token.get("id_token")
                if not isinstance(id_token, str):
                    raise IDTokenError("no_id_token")
                access_token = token.get("access_token")

                def validate(keys: ProviderKeys | None) -> dict[str, Any]:
                    if keys is None:  # refetched less than a minute ago: nothing new
                        raise UnknownSigningKey("unknown_kid")
                    return validate_id_token(
                        id_token,
                        keys=keys,
                        issuer=metadata.issuer,
                        client_id=provider.config.client_id,
                        nonce=self.nonce(state),
                        algorithms=metadata.algorithms,
                        now=now,
                        access_token=access_token if isinstance(access_token, str) else None,
                    )

                try:
                    claims = validate(await self._signing_keys(metadata))
                except UnknownSigningKey:  # the provider may have rotated its keys
                    claims = validate(await self._signing_keys(metadata, refresh=True))
                return claims, token
        except (TimeoutError, httpx2.HTTPError) as exc:
            raise UpstreamUnavailable(reason(exc)) from exc

    async def _token(
        self, provider: Provider, endpoint: str, grant_type: str, **params: str
    ) -> dict[str, Any]:
        """The token endpoint's answer to one grant, the client authenticated.

        Raises:
            UpstreamRefused: the endpoint answered with an OAuth error.
            UpstreamUnavailable: its answer is not a JSON object.
            httpx2.HTTPError: the request failed.
        """
        from authlib.integrations.base_client import OAuthError as AuthlibOAuthError

        async with self._client(provider, authenticated=True) as client:
            try:
                token = await client.fetch_token(endpoint, grant_type=grant_type, **params)
            except AuthlibOAuthError as exc:
                raise UpstreamRefused(error_code(exc.error)) from exc
            except ValueError as exc:  # not a JSON object
                raise UpstreamUnavailable("token_not_json") from exc
        return dict(token)

    async def refresh(self, provider: Provider, refresh_token: str) -> dict[str, Any]:
        """A new token response for a refresh token, within the provider's deadline.

        Raises:
            UpstreamUnavailable: the provider is down, slow or answered nonsense.
            UpstreamRefused: its token endpoint refused (``invalid_grant``: the person must
                sign in again).
        """
        try:
            with anyio.fail_after(self.timeout):
                metadata = await self.metadata(provider)
                return await self._token(
                    provider, metadata.token_endpoint, "refresh_token", refresh_token=refresh_token
                )
        except (TimeoutError, httpx2.HTTPError) as exc:
            raise UpstreamUnavailable(reason(exc)) from exc


def _provider_keys(document: Mapping[str, Any]) -> ProviderKeys:
    """The cache's parser: a JWKS that holds no usable key fails like a failed fetch.

    Raises:
        FetchError: the document is not a JWKS, or holds no usable key.
    """
    try:
        return signing_keys(document)
    except IDTokenError as exc:
        raise FetchError(exc.reason) from exc
