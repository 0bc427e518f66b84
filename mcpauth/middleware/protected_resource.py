"""``ProtectedResourceMiddleware``: pure ASGI middleware that makes any MCP HTTP server an
OAuth 2.1 protected resource (MCP authorization, resource server part).

WebSocket: MCP defines no WebSocket transport, so a WebSocket handshake never reaches the
application: it gets a 403 denial response where the server supports the ASGI
``websocket.http.response`` extension, and a ``websocket.close`` (1008) otherwise.

The application never sees the caller's token: the ``Authorization`` header is removed from
the scope handed to it (MCP RS-17).

Resources: the default verifier creates its HTTP client on the first token it verifies (a
middleware that never verifies one never creates it) and the middleware closes it at ASGI
lifespan shutdown, or in :meth:`ProtectedResourceMiddleware.aclose` (``async with``) where the
server runs no lifespan for it. A ``verifier=`` or ``http_client=`` you pass stays yours. The
same goes for the Redis client of a ``shared_state=``, made on the first request that needs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx2

from mcpauth.dpop import MemoryReplayCache
from mcpauth.errors import (
    ConfigurationError,
    FetchError,
    InsufficientScope,
    InvalidRequest,
    OAuthError,
    PayloadTooLarge,
    TemporarilyUnavailable,
)
from mcpauth.middleware import identity
from mcpauth.middleware._asgi import (
    ASGIApp,
    BodyTooLarge,
    Headers,
    Message,
    Receive,
    Scope,
    Send,
    first_header,
    jsonrpc_error,
    read_body,
    read_headers,
    replay,
    send_json,
)
from mcpauth.middleware._bearer import presented_token, require_b64token
from mcpauth.middleware._cache import remember, token_cache, token_digest
from mcpauth.middleware._challenge import send_error
from mcpauth.middleware._http import AsyncClosing
from mcpauth.middleware._rate_limits import (
    SERVER_BUSY,
    MemoryRateCounter,
    RateCounter,
    RateLimiter,
)
from mcpauth.middleware._sessions import SessionBindings
from mcpauth.middleware._token_buckets import MemoryTokenBuckets, TokenBuckets, ToolLimiter
from mcpauth.middleware.adapters import verified_from
from mcpauth.middleware.options import Limits, ProtectedResource, SharedState
from mcpauth.middleware.policy import MalformedRequest, ScopePolicy, parse_jsonrpc
from mcpauth.middleware.resource_metadata import (
    ResourceMetadataEndpoint,
    metadata_paths,
    metadata_url,
    resource_metadata,
)
from mcpauth.middleware.sender_constraint import DPoP
from mcpauth.middleware.tool_calls import ToolCalls, visible
from mcpauth.middleware.tool_listing import Visible, filtering_send
from mcpauth.middleware.tool_policy import ToolPolicy
from mcpauth.middleware.verifier import (
    JWTVerifier,
    MultiIssuerVerifier,
    TokenVerifier,
    VerifiedToken,
    require_token_verifier,
)
from mcpauth.tracing import tracer as traces
from mcpauth.uris import canonical_resource, path_of

if TYPE_CHECKING:
    from mcpauth.middleware._redis import RedisState, RedisVerdicts

__all__ = ["ProtectedResourceMiddleware"]

logger = logging.getLogger("mcpauth.middleware")
# what the application is called with once a request is admitted: the caller, the receive and
# send it gets, and the token itself (for token exchange only)
Admitted = tuple[identity.Caller, Receive, Send, str]
SESSION_HEADER = b"mcp-session-id"
# MCP RS-17: the application (and anything it calls) never receives the caller's token, nor
# the proof that goes with it.
_STRIPPED = frozenset({b"authorization", b"dpop"})
# every request header the middleware reads, collected in one pass over the request's headers
_READ = _STRIPPED | {
    b"origin",
    SESSION_HEADER,
    b"content-length",
    b"content-encoding",
    b"access-control-request-method",
}
UNAVAILABLE = "The authorization server is unavailable; try again later"


def default_verifier(
    resource: str, issuers: Sequence[str], http: httpx2.AsyncClient | None = None
) -> JWTVerifier | MultiIssuerVerifier:
    """RFC 9068 JWT verification against each authorization server's JWKS, over ``http`` (the
    caller's) or a client each verifier creates on first use; close it with ``aclose()``."""
    verifiers = {issuer: JWTVerifier(issuer, resource, http=http) for issuer in issuers}
    if len(verifiers) == 1:
        return next(iter(verifiers.values()))
    return MultiIssuerVerifier(verifiers)


class ProtectedResourceMiddleware(AsyncClosing):
    """Protect ``app``: every request needs a valid bearer token issued for ``resource``.

    ``resource`` is the server's canonical URI (``https://host/mcp``), or a
    :class:`ProtectedResource` that also names it and lists its scopes; RFC 9728 metadata is
    served at the path-aware and root well-known paths. ``authorization_servers`` are the
    issuers whose tokens are accepted. ``policy`` says which scopes each request needs
    (:class:`ScopePolicy`: for every request, per JSON-RPC method, per tool, resource or
    prompt, with hierarchies); ``filter_tools`` shows a caller only the tools it may call.
    ``verifier`` defaults to RFC 9068 JWT verification with keys from each authorization
    server's JWKS, fetched over ``http_client`` when given; the middleware closes what it
    creates (module docstring). ``dpop`` sets the DPoP rules (:class:`DPoP`), ``limits`` the
    sizes and the rate limit (:class:`Limits`), ``allowed_origins`` the browser origins allowed
    to call (any when ``None``). ``shared_state`` (a :class:`SharedState` or its ``redis://``
    URL) makes replicas share the DPoP single-use record, the rate counts and buckets and, for
    a verifier other than the JWT one, token verdicts; without it each process keeps its own.
    ``tool_policy`` decides each ``tools/call`` on the caller and the call, and hides in
    ``tools/list`` the tools it denies (:mod:`mcpauth.middleware.tool_policy`,
    :class:`CedarPolicy`); ``limits`` may also limit tool calls per user and per tool.

    ``gc_freeze=True`` (off by default; it acts on the whole process): once the application
    reports its ASGI lifespan start-up complete, collect garbage once and ``gc.freeze()``
    what is left, so that Python's cyclic garbage collector no longer walks the imported
    modules and start-up state in every full collection. For an MCP SDK server that saves
    10-20% of the CPU of a ``tools/call`` (bench/middleware). The frozen objects are never
    collected by the cyclic collector (reference counting still frees them): fine for the
    modules and singletons of start-up, a leak for cyclic garbage a start-up leaves to be
    collected later. Without a lifespan (``uvicorn --lifespan off``) nothing is frozen.

    Traces follow the ``OTEL_*`` environment or the application's own OpenTelemetry set-up,
    off when neither asks for them (:mod:`mcpauth.middleware.tracing`).

    Raises:
        ValueError: no authorization server, ``resource`` is not a valid resource URI, a bad
            ``shared_state`` URL, or ``shared_state`` with a ``DPoP(replay=...)`` of your own.
        TypeError: ``verifier`` is not an mcpauth verifier (wrap an MCP SDK verifier in
            :class:`~mcpauth.middleware.FromSDK`).
        ConfigurationError: ``shared_state`` without the ``redis`` package installed, or
            the environment asks for traces the OpenTelemetry SDK cannot give (not
            installed, an exporter it lacks).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        resource: str | ProtectedResource,
        authorization_servers: Sequence[str],
        policy: ScopePolicy | None = None,
        verifier: TokenVerifier | None = None,
        http_client: httpx2.AsyncClient | None = None,
        dpop: DPoP | None = None,
        limits: Limits | None = None,
        allowed_origins: Iterable[str] | None = None,
        filter_tools: bool = False,
        shared_state: str | SharedState | None = None,
        tool_policy: ToolPolicy | None = None,
        gc_freeze: bool = False,
    ) -> None:
        described = ProtectedResource(resource) if isinstance(resource, str) else resource
        self.app = app
        self.gc_freeze = gc_freeze
        self.filter_tools = filter_tools
        self.dpop = dpop if dpop is not None else DPoP()
        self.limits = limits if limits is not None else Limits()
        self.resource = canonical_resource(described.uri)
        self.policy = policy if policy is not None else ScopePolicy()
        supported = (
            described.scopes_supported
            if described.scopes_supported is not None
            else sorted(self.policy.required)
        )
        document = resource_metadata(
            resource=self.resource,
            authorization_servers=authorization_servers,
            scopes_supported=supported or None,
            resource_name=described.name,
            resource_documentation=described.documentation,
        )
        self.metadata_url = metadata_url(self.resource)
        self._metadata_paths = metadata_paths(self.resource)
        self._metadata_endpoint = ResourceMetadataEndpoint(document)
        self._challenge_scopes = tuple(self.policy.required or (document.scopes_supported or ()))
        self.verifier: TokenVerifier
        self._owned: JWTVerifier | MultiIssuerVerifier | None = None
        if verifier is None:
            # Its HTTP client exists once a token is verified; closed at lifespan shutdown.
            self._owned = default_verifier(self.resource, authorization_servers, http_client)
            self.verifier = self._owned
        else:
            where = "ProtectedResourceMiddleware(verifier=...)"
            self.verifier = require_token_verifier(verifier, where)
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)
        self.tokens = token_cache(self.limits.token_cache_size)
        self.sessions = SessionBindings(self.limits.session_table_size)
        self._shared: RedisState | None = None
        self._verdicts: RedisVerdicts | None = None
        counter: RateCounter | None = None
        buckets: TokenBuckets | None = None
        if shared_state is not None:
            config = SharedState(shared_state) if isinstance(shared_state, str) else shared_state
            self._shared, counter, buckets = self._share(config)
        self._rate: RateLimiter | None = None
        if self.limits.rate_limit is not None:
            counter = counter if counter is not None else MemoryRateCounter()
            self._rate = RateLimiter(counter, self.limits.rate_limit, self.limits.rate_window)
        self._tool_calls = self._decided_calls(tool_policy, buckets)
        # whether tools/list answers are rewritten; whether the body may decide anything for a
        # caller the scope policy covers (with tool calls decided, it is read for every POST)
        self._lists_filtered = filter_tools or tool_policy is not None
        self._scoped_body = self.policy.reads_body or filter_tools
        self._serve_http: ASGIApp = self._http
        tracer = traces("mcpauth.middleware")
        if tracer is not None:  # imported only then: nothing of OpenTelemetry when off
            from mcpauth.middleware.tracing import TracedRequests

            self._serve_http = TracedRequests(
                self._http,
                tracer,
                route=path_of(self.resource) or "/",
                body_limit=self.limits.max_body_bytes,
                unprotected=self._unprotected,
            )

    def _share(self, config: SharedState) -> tuple[RedisState, RateCounter, TokenBuckets]:
        """Move the DPoP record, the rate counts and buckets and (but for the JWT verifiers,
        which ask no one) the token verdicts to Redis."""
        if not isinstance(self.dpop.replay, MemoryReplayCache):
            raise ValueError("give shared_state or a DPoP(replay=...) of your own, not both")
        try:
            from mcpauth.middleware import _redis
        except ImportError as exc:
            raise ConfigurationError(
                "shared_state needs the redis package: pip install 'mcpauth-kit[shared-state]'"
            ) from exc
        state = _redis.RedisState(config, self.resource, clock=self.dpop.clock)
        self.dpop = dataclasses.replace(self.dpop, replay=_redis.RedisReplayCache(state))
        if not isinstance(self.verifier, JWTVerifier | MultiIssuerVerifier):
            self._verdicts = _redis.RedisVerdicts(state)
        return state, _redis.RedisRateCounter(state), _redis.RedisTokenBuckets(state)

    def _decided_calls(
        self, policy: ToolPolicy | None, buckets: TokenBuckets | None
    ) -> ToolCalls | None:
        """The decisions on each ``tools/call``, when a policy or a tool-call limit asks for
        them (``None``: no request pays for them)."""
        limits = self.limits
        limiter = None
        if limits.user_rate is not None or limits.tool_rates:
            if buckets is None:
                buckets = MemoryTokenBuckets(limits.bucket_table_size, clock=self.dpop.clock)
            limiter = ToolLimiter(buckets, limits.user_rate, limits.tool_rates)
        if policy is not None and not callable(policy):
            raise TypeError("tool_policy must be a callable: (ToolCaller, ToolCall) -> decision")
        if policy is None and limiter is None:
            return None
        return ToolCalls(policy, limiter)

    async def aclose(self) -> None:
        """Close what the middleware opened (the default verifier's HTTP client, the shared
        state's Redis client); lifespan shutdown does this too. A later request opens it
        again."""
        if self._owned is not None:
            await self._owned.aclose()
        if self._shared is not None:
            await self._shared.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._serve_http(scope, receive, send)  # _http, in a span when tracing
        elif scope["type"] == "lifespan":
            await self.app(scope, receive, self._lifespan_send(send))
        elif scope["type"] == "websocket":
            # MCP has no WebSocket transport: nothing to protect, so nothing passes.
            deny = _websocket_denial(scope, send)
            await send_json(deny, 403, jsonrpc_error(-32600, "WebSocket is not accepted here"))
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An HTTP request: admitted (or answered) before the application is called, so that
        while it runs the middleware keeps two frames and few objects for the garbage collector
        to walk."""
        admitted = await self._admit(scope, receive, send)
        if admitted is None:
            return
        caller, receive, send, raw = admitted
        resets = caller.enter(scope, raw)
        try:
            await self.app(scope, receive, send)
        finally:
            caller.leave(resets)

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> Admitted | None:
        """Everything before the application: the caller, and the ``receive`` and ``send``
        the application gets; ``None`` when the request was answered here (a refusal, the
        metadata document, a preflight passed through)."""
        if scope["path"] in self._metadata_paths:
            await self._metadata_endpoint(scope, receive, send)
            return None
        headers, kept = read_headers(scope, _READ, strip=_STRIPPED)
        if scope.get("method") == "OPTIONS" and b"access-control-request-method" in headers:
            scope["headers"] = kept
            await self.app(scope, receive, send)
            return None
        allowed = self.allowed_origins
        if allowed is not None and not _origin_allowed(headers, allowed):
            # MCP Streamable HTTP transport: an invalid Origin gets 403.
            await send_json(send, 403, jsonrpc_error(-32600, "Origin not allowed"))
            return None
        try:
            presented = presented_token(
                headers.get(b"authorization", ()), max_bytes=self.limits.max_header_bytes
            )
            if presented is None:
                caller = None
            else:
                # _authenticate inline: a warm Bearer request awaits nothing
                scheme, raw = presented
                digest = token_digest(raw)
                caller = self.tokens.get(digest)
                if caller is None:
                    caller = await self._verified(raw, digest)
                # per request, never cached: the proof is of this request (RFC 9449 §7)
                bound = self.dpop.binding(scheme, caller.token.claims)
                if bound is not None:
                    proofs = headers.get(b"dpop", ())
                    await self.dpop.check_proof(scope, raw, bound, self.resource, proofs=proofs)
        except OAuthError as error:
            await self._refuse(send, error, used_dpop=_scheme_of(headers) == "dpop")
            return None
        if presented is None or caller is None:
            await self._refuse(send, None)
            return None
        scope["headers"] = kept
        return await self._authorized(scope, receive, send, caller, presented, headers)

    async def _authorized(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        caller: identity.Caller,
        presented: tuple[str, str],
        headers: Headers,
    ) -> Admitted | None:
        verified = caller.token
        if self._rate is not None:
            refusal = await self._rate.refusal(verified.principal)
            if refusal is not None:
                status, message, retry_after = refusal
                error = jsonrpc_error(SERVER_BUSY, message)
                await send_json(send, status, error, [("Retry-After", retry_after)])
                return None
        session = headers.get(SESSION_HEADER)
        session_id = session[0].decode("latin-1") if session else None
        # MCP RS-19/RS-20: a session id never authenticates; it must belong to this caller.
        if session_id is not None and not self.sessions.allows(session_id, verified.principal):
            await send_json(send, 404, jsonrpc_error(-32001, "Session not found"))
            return None
        messages: Sequence[dict[str, Any]] = ()
        needed = self.policy.required
        # The body is read when a decision depends on it: a per-operation rule, or tools to
        # hide, that the caller's scopes do not already cover; a tool policy or tool-call limit.
        tool_calls = self._tool_calls
        if (
            tool_calls is not None
            or (self._scoped_body and not self.policy.covers(verified.scopes))
        ) and scope.get("method") == "POST":
            try:
                needed, receive, messages = await self._needed_scopes(receive, headers)
            except OAuthError as error:
                await send_json(send, error.status_code, error.to_dict())
                return None
        if needed and self.policy.missing(verified.scopes, needed):
            description = "This operation needs the scopes: " + " ".join(sorted(needed))
            used_dpop = presented[0] == "dpop"
            await self._refuse(send, InsufficientScope(description), needed, used_dpop=used_dpop)
            return None
        if tool_calls is not None and messages:
            refused = await tool_calls.refusal(verified, messages)
            if refused is not None:
                await send_json(send, *refused)
                return None
        scheme, raw = presented  # the token itself, for token exchange only
        send_out: Send = _SessionSend(self.sessions, scope, send, verified, session_id)
        if scheme == "dpop" and self.dpop.uses_nonces:
            send_out = _with_headers(send_out, self.dpop.nonce_header())
        if self._lists_filtered and any(m.get("method") == "tools/list" for m in messages):
            send_out = filtering_send(send_out, self._visible_tools(verified))
        return caller, receive, send_out, raw

    def _visible_tools(self, verified: VerifiedToken) -> Visible:
        """What ``tools/list`` shows this caller: the tools its scopes cover (``filter_tools``)
        that the tool policy does not hide."""
        scoped = None
        if self.filter_tools:
            granted = self.policy.effective(verified.scopes)
            per_tool = self.policy.targets["tools"]

            def scoped(name: str) -> bool:
                return per_tool.get(name, frozenset()) <= granted

        tool_calls = self._tool_calls
        return visible(verified, scoped, tool_calls.policy if tool_calls is not None else None)

    async def _verified(self, raw: str, digest: bytes) -> identity.Caller:
        # Only a token of b64token syntax is verified (and then kept): one found in the cache
        # passed this check when it was verified.
        require_b64token(raw)
        if self._verdicts is not None:
            return await self._verified_shared(raw, digest, self._verdicts)
        return self._kept(await self._verify(raw), digest)

    async def _verified_shared(
        self, raw: str, digest: bytes, verdicts: RedisVerdicts
    ) -> identity.Caller:
        """The verdict another replica obtained, else the verifier's, then shared. With Redis
        down the verifier alone decides: it is the authority, the shared verdicts only spare
        it calls (docs/security.md T30)."""
        try:
            shared = await verdicts.get(digest)
        except TemporarilyUnavailable:
            return self._kept(await self._verify(raw), digest)
        if shared is not None:
            return self._kept(shared, digest)
        caller = self._kept(await self._verify(raw), digest)
        with contextlib.suppress(TemporarilyUnavailable):  # the next replica asks itself
            await verdicts.put(digest, caller.token)
        return caller

    def _kept(self, verified: VerifiedToken, digest: bytes) -> identity.Caller:
        """The caller of ``verified``, kept in this process until its deadline."""
        caller = identity.Caller(verified, digest)
        remember(self.tokens, digest, caller)
        return caller

    async def _verify(self, raw: str) -> VerifiedToken:
        # MCP RS-08: validate before processing; RS-21: every request, never per session.
        try:
            # whatever a verifier returns is checked for this resource: never a 500
            verified = verified_from(await self.verifier.verify_token(raw), self.resource)
        except TemporarilyUnavailable as exc:
            # The 503 body stays plain whatever the verifier wrote: no internal URLs.
            logger.warning("cannot verify a token right now: %s", exc.description)
            retry_after = exc.headers.get("Retry-After")
            raise TemporarilyUnavailable(
                UNAVAILABLE, headers={"Retry-After": retry_after} if retry_after else None
            ) from exc
        except FetchError as exc:  # a verifier of your own let a failed fetch through
            logger.warning("cannot verify a token right now: %s", exc.message)
            raise TemporarilyUnavailable(UNAVAILABLE) from exc
        return verified

    async def _needed_scopes(
        self, receive: Receive, headers: Headers
    ) -> tuple[frozenset[str], Receive, list[dict[str, Any]]]:
        """The scopes a POST needs, the ``receive`` that replays its body, and its JSON-RPC
        messages (read when a decision depends on them)."""
        length = _first(headers, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limits.max_body_bytes:
            raise PayloadTooLarge("The request body is too large")
        encoding = _first(headers, b"content-encoding")
        if encoding is not None and encoding.strip().lower() != "identity":
            raise InvalidRequest("Encoded request bodies are not accepted")
        try:
            body = await read_body(receive, self.limits.max_body_bytes)
        except BodyTooLarge:
            raise PayloadTooLarge("The request body is too large") from None
        try:
            messages = parse_jsonrpc(body)
        except MalformedRequest:
            raise InvalidRequest("The request body is not a well-formed JSON-RPC message") from None
        return self.policy.needed_for(messages), replay(body, receive), messages

    async def _refuse(
        self,
        send: Send,
        error: OAuthError | None,
        scopes: Iterable[str] | None = None,
        *,
        used_dpop: bool = False,
    ) -> None:
        await send_error(
            send,
            error,
            resource_metadata=self.metadata_url,
            scopes=self._challenge_scopes if scopes is None else scopes,
            dpop=self.dpop,
            used_dpop=used_dpop,
        )

    def _unprotected(self, scope: Scope) -> bool:
        """The requests that need no token: the metadata document, CORS preflights."""
        return scope["path"] in self._metadata_paths or _is_preflight(scope)

    def _lifespan_send(self, send: Send) -> Send:
        async def lifespan_send(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await self.aclose()
            elif message["type"] == "lifespan.startup.complete" and self.gc_freeze:
                gc.collect()  # what start-up left to collect is collected, not frozen
                gc.freeze()
            await send(message)

        return lifespan_send


class _SessionSend:
    """The application's ``send``, binding a session id the application issues to the caller
    (and forgetting the request's session after a successful DELETE). A slotted object rather
    than a closure: fewer objects per request in flight."""

    __slots__ = ("_method", "_principal", "_request_session", "_send", "_sessions")

    def __init__(
        self,
        sessions: SessionBindings,
        scope: Scope,
        send: Send,
        verified: VerifiedToken,
        request_session: str | None,
    ) -> None:
        self._sessions = sessions
        self._method = scope.get("method")
        self._send = send
        self._principal = verified.principal
        self._request_session = request_session

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            status = int(message["status"])
            if status < 400:
                issued = _response_header(message, SESSION_HEADER)
                if issued is not None:
                    self._sessions.bind(issued, self._principal)
            request_session = self._request_session
            if self._method == "DELETE" and request_session is not None and status < 300:
                self._sessions.forget(request_session)
        await self._send(message)


def _first(headers: Headers, name: bytes) -> str | None:
    values = headers.get(name)
    return values[0].decode("latin-1") if values else None


def _origin_allowed(headers: Headers, allowed: frozenset[str]) -> bool:
    origin = _first(headers, b"origin")
    return origin is None or origin in allowed


def _with_headers(send: Send, headers: Mapping[str, str]) -> Send:
    """``send`` adding ``headers`` to the response unless the application set them itself (RFC
    9449 §9: a resource's new nonce goes out with its responses)."""
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {bytes(k).lower() for k, _ in message.get("headers", ())}
            added = [(k, v) for k, v in extra if k not in present]
            if added:
                message = {**message, "headers": [*message.get("headers", ()), *added]}
        await send(message)

    return send_with_headers


def _scheme_of(headers: Headers) -> str | None:
    """The scheme of the request's Authorization header, lower case, unchecked (for choosing
    which challenge carries an error)."""
    value = _first(headers, b"authorization")
    return value.strip().split(" ", 1)[0].lower() if value else None


def _websocket_denial(scope: Scope, send: Send) -> Send:
    """A ``send`` that turns an HTTP response into a refused WebSocket handshake: the ASGI
    denial response where the server supports it, else ``websocket.close`` (1008)."""
    extensions = scope.get("extensions") or {}
    if "websocket.http.response" in extensions:

        async def deny_with_response(message: Message) -> None:
            await send({**message, "type": "websocket." + message["type"]})

        return deny_with_response

    async def deny_with_close(message: Message) -> None:
        if message["type"] == "http.response.start":
            await send({"type": "websocket.close", "code": 1008})

    return deny_with_close


def _is_preflight(scope: Scope) -> bool:
    """A CORS preflight, for the tracing hook (``_http`` finds one among the headers it reads)."""
    return (
        scope.get("method") == "OPTIONS"
        and first_header(scope, b"access-control-request-method") is not None
    )


def _response_header(message: Message, name: bytes) -> str | None:
    for key, value in message.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
