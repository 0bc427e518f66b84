"""The sans-I/O token flow behind :class:`mcpauth.client.OAuth`, for running it another way.

A flow is a generator of steps. Whoever runs it performs each step and sends back the result:

- :class:`HTTPRequest`: send it; send back the :class:`HTTPResponse`.
- :class:`Resend`: send the caller's own request with that ``Authorization`` value; send back
  the :class:`HTTPResponse` (its body is not needed).
- :class:`Lock`: take this :class:`OAuthFlow`'s lock (unless already held) and hold it until
  the next :class:`Resend` or the end of the flow; send back ``None``.
- :class:`StorageCall`: send back ``step.run()``, run in a worker thread when the runner is
  async and ``step.blocking`` is true.
- :class:`RedirectURI`: send back the redirect handler's redirect URI.
- :class:`Authorize`: send the user to ``step.url``; send back the URL the authorization
  server redirected to.
- :class:`ShowUserCode`: show the person ``step.authorization`` (the device grant's URL and
  code: the grant's ``show``); send back ``None``.
- :class:`Wait`: sleep ``step.seconds`` (the device grant's polling interval); send back
  ``None``.

:meth:`OAuthFlow.request_flow` authenticates one request; :meth:`OAuthFlow.acquire_flow` gets a
token without one. Nothing here opens a socket, a file or a browser.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mcpauth.client._http import MCP_PROTOCOL_VERSION, HTTPRequest, HTTPResponse
from mcpauth.client.authorization import build_authorization, parse_callback, select_scope
from mcpauth.client.challenge import BearerChallenge, parse_bearer_challenge
from mcpauth.client.compatibility import ServerCompatibility
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.device import (
    ShowUserCode,
    Wait,
    device_authorization_request,
    device_flow,
)
from mcpauth.client.discovery import Discovery, discover
from mcpauth.client.dpop_state import DPoPState, asks_for_nonce
from mcpauth.client.enterprise import exchange_for_id_jag
from mcpauth.client.errors import (
    IssuerMismatch,
    LoginRequired,
    RegistrationError,
    TokenRequestFailed,
)
from mcpauth.client.options import (
    PERSON_GRANTS,
    AuthorizationCodeGrant,
    DeviceCodeGrant,
    Grant,
    JWTBearerGrant,
    Policy,
    WorkloadIdentityGrant,
)
from mcpauth.client.proofs import DPoPKey
from mcpauth.client.registration import (
    CODE_GRANTS,
    DEVICE_GRANTS,
    Registration,
    check_preregistered,
    cimd_credentials,
    register,
)
from mcpauth.client.steps import (
    Authorize,
    Flow,
    Lock,
    RedirectURI,
    Resend,
    Step,
    StorageCall,
    StorageMethod,
)
from mcpauth.client.storage import TokenKey, TokenStorage
from mcpauth.client.tokens import (
    TokenSet,
    authorization_code_form,
    client_credentials_form,
    jwt_bearer_form,
    merge_refreshed,
    parse_token_response,
    refresh_form,
    token_request,
)
from mcpauth.oauth import OFFLINE_ACCESS, parse_scope
from mcpauth.uris import canonical_resource

__all__ = [
    "Authorize",
    "Flow",
    "FlowConfig",
    "HTTPRequest",
    "HTTPResponse",
    "Lock",
    "OAuthFlow",
    "RedirectURI",
    "Resend",
    "ShowUserCode",
    "Step",
    "StorageCall",
    "StorageMethod",
    "Wait",
    "is_step_up",
]


@dataclass(frozen=True)
class FlowConfig:
    """Everything the flow is told; nothing here is learned from servers."""

    server_url: str
    grant: Grant = field(default_factory=AuthorizationCodeGrant)
    credentials: ClientCredentials | None = None
    registration: Registration = field(default_factory=Registration)
    policy: Policy = field(default_factory=Policy)


def is_step_up(response: HTTPResponse, challenge: BearerChallenge | None) -> bool:
    """A 403 that asks for more scope (RFC 6750 §3.1 ``insufficient_scope``)."""
    if response.status_code != 403 or challenge is None:
        return False
    return challenge.error == "insufficient_scope" or (
        challenge.error is None and challenge.scope is not None
    )


class OAuthFlow:
    """Shared state (discovery, client, tokens) and the flows that use it."""

    def __init__(self, config: FlowConfig, storage: TokenStorage) -> None:
        self.config = config
        self.storage = storage
        self.server_url = canonical_resource(config.server_url)
        self.discovery: Discovery | None = None
        self.client: ClientCredentials | None = None
        self.tokens: TokenSet | None = None
        self.requested: list[str] = list(config.grant.scopes)
        self.authorizations = 0  # full authorizations so far; tests and the CLI read it
        self._loaded = False
        self.dpop = DPoPState()

    # -- the flow for one request -------------------------------------------------------------

    def request_flow(self) -> Flow:
        """Authenticate one request: send, then react to 401 and 403 a bounded number of times."""
        used = yield from self.current_tokens()
        response: HTTPResponse = yield self._resend(used)
        self.dpop.remember_nonce(self.server_url, response)
        nonce_retried = False
        for _ in range(self.config.policy.max_attempts):
            bound = used is not None and used.bound
            challenge = parse_bearer_challenge(response.challenges, dpop=bound)
            self.dpop.note_challenges(response)
            if bound and asks_for_nonce(response):
                if nonce_retried:
                    return  # RFC 9449 §9: the nonce retry is made once per request
                nonce_retried = True
                response = yield self._resend(used)
                self.dpop.remember_nonce(self.server_url, response)
                continue
            if response.status_code == 401:
                used = yield from self._after_unauthorized(used, challenge)
            elif is_step_up(response, challenge) and challenge is not None:
                if not _may_gain(used, challenge):
                    return  # the token already has what is asked for: more consent cannot help
                used = yield from self._step_up(challenge)
            else:
                return
            response = yield self._resend(used)
            self.dpop.remember_nonce(self.server_url, response)

    def _resend(self, tokens: TokenSet | None) -> Resend:
        """The caller's request with ``tokens`` (and a proof for it when they are bound)."""
        if tokens is None:
            return Resend(None)
        proof = self.dpop.request_proof(tokens.access_token) if tokens.bound else None
        return Resend(tokens.authorization, proof)

    @property
    def dpop_key(self) -> DPoPKey | None:
        """The DPoP key of the current authorization server (``mcpauth token --dpop``)."""
        return self.dpop.key

    def acquire_flow(self, *, force: bool = False, interactive: bool = True) -> Flow:
        """A usable token without a caller's request (``mcpauth login`` / ``token``).

        Raises:
            LoginRequired: a user would have to authorize and ``interactive`` is false.
        """
        if not force:
            tokens = yield from self.current_tokens()
            if tokens is not None and not tokens.expires_within(0, self._now()):
                return tokens
        if not interactive and isinstance(self.config.grant, PERSON_GRANTS):
            raise LoginRequired(f"not logged in to {self.server_url}; run `mcpauth login` first")
        yield Lock()
        response = yield _probe(self.server_url)
        self.dpop.note_challenges(response)
        challenge = parse_bearer_challenge(response.challenges)
        return (yield from self.authorize(challenge))

    # -- tokens ------------------------------------------------------------------------------

    def current_tokens(self) -> Flow:
        """Stored tokens, refreshed first when they expire within the margin; else ``None``."""
        yield from self._load()
        tokens = self.tokens
        if tokens is None or not tokens.expires_within(
            self.config.policy.refresh_margin, self._now()
        ):
            return tokens
        yield Lock()
        if self.tokens is not tokens:  # someone else renewed them while we waited
            return self.tokens
        renewed = yield from self._renew()
        if renewed is not None:
            return renewed
        return tokens if not tokens.expires_within(0, self._now()) else None

    def _renew(self) -> Flow:
        """Refresh, or for machine grants simply ask again; ``None`` when that is not possible."""
        if self.discovery is None or self.client is None or self.tokens is None:
            return None
        if self.tokens.refresh_token:
            return (yield from self._refresh(self.discovery, self.client, self.tokens))
        if not isinstance(self.config.grant, PERSON_GRANTS):
            return (yield from self._grant(self.discovery, self.client, self._scope_for(None)))
        return None

    def _refresh(self, discovery: Discovery, client: ClientCredentials, tokens: TokenSet) -> Flow:
        form = refresh_form(tokens.refresh_token or "", resource=discovery.resource)
        try:
            fresh = yield from self._token_call(discovery, client, form, tokens.scope)
        except TokenRequestFailed:
            yield from self._drop_tokens()
            return None
        return (yield from self._keep(merge_refreshed(tokens, fresh)))

    def _after_unauthorized(self, used: TokenSet | None, challenge: BearerChallenge | None) -> Flow:
        yield Lock()
        current = self.tokens
        if current is not None and (used is None or current.access_token != used.access_token):
            return current  # renewed by a concurrent request
        if current is not None and current.refresh_token and self.discovery and self.client:
            refreshed = yield from self._refresh(self.discovery, self.client, current)
            if refreshed is not None:
                return refreshed
        return (yield from self.authorize(challenge))

    def _step_up(self, challenge: BearerChallenge) -> Flow:
        yield Lock()
        # MCP 2026-07-28 "Step-Up Authorization Flow": request the union of scopes.
        return (yield from self.authorize(challenge))

    # -- full authorization ------------------------------------------------------------------

    def authorize(self, challenge: BearerChallenge | None) -> Flow:
        """Discover, get a client ID, run the grant and store the tokens."""
        discovery = yield from discover(
            self.server_url, challenge, select=self.config.policy.select_server
        )
        if self.discovery is None or self.discovery.issuer != discovery.issuer:
            self.client = None  # MCP 2026-07-28: credentials never cross to another AS
        self.discovery = discovery
        yield from self._store("set_discovery", self.server_url, discovery)
        redirect_uri = None
        if isinstance(self.config.grant, AuthorizationCodeGrant):
            redirect_uri = yield RedirectURI()
        client = yield from self._client(discovery, redirect_uri)
        scope = self._scope_for(challenge)
        self.authorizations += 1
        tokens = yield from self._grant(discovery, client, scope, redirect_uri)
        return (yield from self._keep(tokens))

    def _scope_for(self, challenge: BearerChallenge | None) -> str | None:
        prm = self.discovery.protected_resource if self.discovery else None
        metadata = self.discovery.metadata if self.discovery else None
        grant = self.config.grant
        scope = select_scope(
            challenge.scopes if challenge else [],
            prm.scopes_supported if prm else None,
            previous=self.requested,
            as_scopes=metadata.scopes_supported if metadata else None,
            offline_access=isinstance(grant, PERSON_GRANTS) and grant.offline_access,
        )
        self.requested = [s for s in parse_scope(scope) if s != OFFLINE_ACCESS]
        return scope

    def _client(self, discovery: Discovery, redirect_uri: str | None) -> Flow:
        issuer, metadata = discovery.issuer, discovery.metadata
        if self.config.credentials is not None:
            self.client = check_preregistered(self.config.credentials, issuer)
            return self.client
        cimd = cimd_credentials(self.config.registration, metadata)
        if cimd is not None:
            self.client = cimd
            return cimd
        stored = self.client
        if stored is None:
            stored = yield from self._store("get_client", issuer)
        if stored is not None and stored.issuer == issuer and self._fits(stored):
            self.client = stored
            return stored
        if isinstance(self.config.grant, WorkloadIdentityGrant):
            # the platform token is the credential; the server finds the client from it
            self.client = ClientCredentials("", auth_method="none", issuer=issuer)
            return self.client
        if isinstance(self.config.grant, DeviceCodeGrant):
            client = yield from register(
                metadata, self.config.registration, [], issuer, DEVICE_GRANTS
            )
        elif redirect_uri is None:
            raise RegistrationError(
                f"{self.config.grant.name} needs pre-registered client credentials"
            )
        else:
            client = yield from register(
                metadata, self.config.registration, [redirect_uri], issuer, CODE_GRANTS
            )
        yield from self._store("set_client", issuer, client)
        self.client = client
        return client

    def _fits(self, stored: ClientCredentials) -> bool:
        """Whether a client this library registered was registered for the grant it is about
        to run (one registered for the device grant has no redirect URI; one registered for
        the code has not the device grant); a client whose grants are not known is taken as
        the code grant's, as every earlier version registered."""
        if stored.source != "dcr":
            return True
        wanted = DEVICE_GRANTS if isinstance(self.config.grant, DeviceCodeGrant) else CODE_GRANTS
        return set(wanted[:1]) <= set(stored.grant_types or CODE_GRANTS)

    def _grant(
        self,
        discovery: Discovery,
        client: ClientCredentials,
        scope: str | None,
        redirect_uri: str | None = None,
    ) -> Flow:
        metadata, grant = discovery.metadata, self.config.grant
        if isinstance(grant, WorkloadIdentityGrant):
            try:
                platform_token = grant.read()
            except ValueError as exc:
                raise TokenRequestFailed("invalid_request", str(exc)) from exc
            form = jwt_bearer_form(platform_token, resource=discovery.resource, scope=scope)
        elif isinstance(grant, DeviceCodeGrant):
            return (yield from self._device(discovery, client, scope, grant))
        elif isinstance(grant, JWTBearerGrant):
            id_jag = yield from exchange_for_id_jag(
                grant.identity,
                audience=discovery.issuer,
                resource=discovery.resource,
                scope=scope,
            )
            form = jwt_bearer_form(id_jag, resource=discovery.resource, scope=scope)
        elif not isinstance(grant, AuthorizationCodeGrant):
            form = client_credentials_form(resource=discovery.resource, scope=scope)
        else:
            compatible = self._compatibility(discovery)
            pending = build_authorization(
                metadata,
                issuer=discovery.issuer,
                client_id=client.client_id,
                redirect_uri=redirect_uri or "",
                resource=compatible.resource_for(discovery.resource),
                scope=compatible.scope_out(scope),
                pkce_confirmed=compatible.assume_pkce_s256,
            )
            callback: str = yield Authorize(pending.url)
            code = parse_callback(pending, callback)
            form = authorization_code_form(
                code,
                redirect_uri=pending.redirect_uri,
                verifier=pending.pkce.verifier,
                resource=discovery.resource,  # adapted as in the request: see _token_call
            )
        return (yield from self._token_call(discovery, client, form, scope))

    def _device(
        self, discovery: Discovery, client: ClientCredentials, scope: str | None, grant: Any
    ) -> Flow:
        """RFC 8628: the code shown, then polls until the person decides (see
        :func:`~mcpauth.client.device.device_flow`)."""
        compatible = self._compatibility(discovery)
        start = device_authorization_request(
            discovery.metadata,
            client,
            resource=compatible.resource_for(discovery.resource),
            scope=compatible.scope_out(scope),
            now=self._now(),
        )

        def poll(form: dict[str, str]) -> Flow:
            return self._token_call(discovery, client, form, scope)

        return (
            yield from device_flow(
                start,
                poll,
                resource=discovery.resource,  # adapted as in the request: see _token_call
                clock=self._now,
                timeout=grant.timeout,
            )
        )

    # -- DPoP --------------------------------------------------------------------------------

    def _compatibility(self, discovery: Discovery) -> ServerCompatibility:
        """The policy's compatibility, if it is for this authorization server.

        Raises:
            IssuerMismatch: it names another server (``ServerCompatibility(issuer=...)``).
        """
        compatible = self.config.policy.compatibility
        if compatible.issuer is not None and compatible.issuer != discovery.issuer:
            raise IssuerMismatch(
                f"the compatibility settings are for {compatible.issuer}, "
                f"not for {discovery.issuer}: nothing was sent"
            )
        return compatible

    def _token_call(
        self,
        discovery: Discovery,
        client: ClientCredentials,
        form: dict[str, str],
        scope: str | None,
    ) -> Flow:
        """The tokens of a token request, sent with a DPoP proof when DPoP is offered (see
        :meth:`DPoPState.token_call`).

        Raises:
            TokenRequestFailed: refused, or unbound tokens while the policy requires DPoP.
        """
        key = yield from self._dpop_key(discovery)
        compatible = self._compatibility(discovery)
        form = compatible.token_form(form)

        def build() -> HTTPRequest:
            return token_request(discovery.metadata, client, form, now=self._now())

        response, dpop = yield from self.dpop.token_call(build, key)
        tokens = parse_token_response(response, now=self._now(), requested_scope=scope, dpop=dpop)
        tokens = replace(tokens, scope=compatible.scope_in(tokens.scope))
        if self.config.policy.dpop == "required" and not tokens.bound:
            raise TokenRequestFailed("invalid_response", "the token is not DPoP-bound")
        return tokens

    def _dpop_key(self, discovery: Discovery) -> Flow:
        """The key to bind this server's tokens with (see :meth:`DPoPState.key_for`)."""
        return (
            yield from self.dpop.key_for(
                discovery.issuer,
                self.dpop.offered(discovery.metadata.dpop_signing_alg_values_supported),
                self.config.policy.dpop,
                self._store if hasattr(self.storage, "set_dpop_key") else None,
            )
        )

    # -- storage -----------------------------------------------------------------------------

    def _key(self) -> TokenKey | None:
        if self.discovery is None or self.client is None:
            return None
        return TokenKey(self.discovery.issuer, self.discovery.resource, self.client.client_id)

    def _now(self) -> float:
        return self.config.policy.clock()

    def _store(self, method: StorageMethod, *args: Any) -> Flow:
        """One call of the storage, made by the runner (see :class:`StorageCall`)."""
        return (yield StorageCall(self.storage, method, args))

    def _keep(self, tokens: TokenSet) -> Flow:
        self.tokens = tokens
        key = self._key()
        if key is not None:
            yield from self._store("set_tokens", key, tokens)
        return tokens

    def _drop_tokens(self) -> Flow:
        self.tokens = None
        key = self._key()
        if key is not None:
            yield from self._store("delete_tokens", key)

    def _load(self) -> Flow:
        """Pick up what a previous process stored: discovery, then client, then tokens."""
        if self._loaded:
            return
        yield Lock()
        if self._loaded:  # a concurrent request loaded it while this one waited for the lock
            return
        discovery: Discovery | None = yield from self._store("get_discovery", self.server_url)
        self._loaded = True
        if discovery is None:
            return
        self.discovery = discovery
        client = yield from self._stored_client(discovery)
        if client is None:
            return
        self.client = client
        key = TokenKey(discovery.issuer, discovery.resource, client.client_id)
        self.tokens = yield from self._store("get_tokens", key)
        if self.tokens is not None and self.tokens.bound:
            stored = None
            if hasattr(self.storage, "get_dpop_key"):
                stored = yield from self._store("get_dpop_key", discovery.issuer)
            if isinstance(stored, DPoPKey):
                self.dpop.key, self.dpop.issuer = stored, discovery.issuer
            else:
                self.tokens = None  # bound to a key this storage did not keep: useless
        elif self.tokens is not None and self.config.policy.dpop == "required":
            self.tokens = None  # Bearer tokens of an earlier run: not what is asked for now
        if self.tokens and self.tokens.scope:
            self.requested = list(dict.fromkeys([*self.requested, *parse_scope(self.tokens.scope)]))

    def _stored_client(self, discovery: Discovery) -> Flow:
        configured = self.config.credentials
        if configured is not None:
            if configured.issuer not in (None, discovery.issuer):
                return None
            return configured.bound_to(discovery.issuer)
        cimd = None
        if self.config.registration.client_metadata_url:  # else the metadata is not needed
            cimd = cimd_credentials(self.config.registration, discovery.metadata)
        return cimd or (yield from self._store("get_client", discovery.issuer))

    def forget(self) -> None:
        """Drop tokens and discovery for this server (``mcpauth logout``), calling the storage
        directly on the caller's thread."""
        self.storage.forget(self.server_url)
        self._loaded = True
        self.tokens = None
        self.discovery = None


def _may_gain(tokens: TokenSet | None, challenge: BearerChallenge) -> bool:
    """Whether re-authorizing could add a challenged scope the token lacks (CL-14)."""
    granted = set(parse_scope(tokens.scope)) if tokens else set()
    return not challenge.scopes or not set(challenge.scopes) <= granted


def _probe(server_url: str) -> HTTPRequest:
    """A harmless MCP request that a protected server answers with its challenge."""
    body = b'{"jsonrpc":"2.0","id":0,"method":"ping"}'
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MCP_PROTOCOL_VERSION,
    }
    return HTTPRequest("POST", server_url, headers, body)
