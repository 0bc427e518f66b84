"""``OAuth``: one object that authenticates ``httpx`` and ``httpx2`` clients for an MCP server.

It is both an :class:`httpx.Auth` and an :class:`httpx2.Auth` (the HTTP client of the official
MCP Python SDK), so it plugs into ``streamable_http_client(url, http_client=...)`` as well as
into scripts. The logic is the sans-I/O flow in :mod:`mcpauth.client._flow`; this module only
moves its steps on and off the wire.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any

import anyio
import anyio.to_thread
import httpx
import httpx2

from mcpauth.client._flow import Authorize, Flow, FlowConfig, Grant, Lock, OAuthFlow, RedirectURI
from mcpauth.client._flow import Resend as _Resend
from mcpauth.client._http import HTTPRequest, HTTPResponse
from mcpauth.client.callback import (
    DEFAULT_TIMEOUT,
    CallableRedirectHandler,
    LoopbackRedirectHandler,
    RedirectHandler,
)
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.discovery import ServerSelector
from mcpauth.client.enterprise import IdentityAssertion
from mcpauth.client.registration import RegistrationOptions
from mcpauth.client.storage import MemoryStorage, TokenStorage
from mcpauth.client.tokens import TokenSet
from mcpauth.jwt import PrivateKey

AnyRequest = httpx.Request | httpx2.Request
AnyResponse = httpx.Response | httpx2.Response


def _to_wire(template: AnyRequest | None, step: HTTPRequest) -> AnyRequest:
    """An ``httpx`` or ``httpx2`` request, matching the library of ``template``."""
    cls = httpx2.Request if isinstance(template, httpx2.Request) else httpx.Request
    return cls(step.method, step.url, headers=dict(step.headers), content=step.body)


def _from_wire(response: AnyResponse, *, with_body: bool) -> HTTPResponse:
    headers = {k.lower(): v for k, v in response.headers.items()}
    challenges = tuple(response.headers.get_list("www-authenticate"))
    body = response.content if with_body else b""
    return HTTPResponse(response.status_code, headers, body, challenges)


def _handler(
    redirect_handler: RedirectHandler | Callable[[str], str] | None,
    redirect_uri: str | None,
    open_browser: bool,
    callback_timeout: float,
) -> RedirectHandler:
    if redirect_handler is None:
        port = 0 if redirect_uri is None else (httpx.URL(redirect_uri).port or 80)
        path = "/callback" if redirect_uri is None else httpx.URL(redirect_uri).path
        return LoopbackRedirectHandler(
            port=port, path=path, open_browser=open_browser, timeout=callback_timeout
        )
    if isinstance(redirect_handler, RedirectHandler):
        return redirect_handler
    if redirect_uri is None:
        raise ValueError("a callable redirect_handler needs redirect_uri")
    return CallableRedirectHandler(redirect_uri, redirect_handler)


def _credentials(
    client_id: str | None,
    client_secret: str | None,
    private_key: PrivateKey | None,
    auth_method: str | None,
    signing_alg: str,
    client_issuer: str | None,
) -> ClientCredentials | None:
    if client_id is None:
        return None
    if auth_method is None:
        auth_method = (
            "private_key_jwt" if private_key else "client_secret_basic" if client_secret else "none"
        )
    return ClientCredentials(
        client_id=client_id,
        client_secret=client_secret,
        auth_method=auth_method,
        private_key=private_key,
        signing_alg=signing_alg,
        issuer=client_issuer,
    )


class OAuth(httpx.Auth, httpx2.Auth):
    """OAuth 2.1 for MCP servers: discovery, registration, PKCE, refresh, step-up.

    Pass it as ``auth=`` to ``httpx.Client``/``AsyncClient`` or ``httpx2.AsyncClient``.
    ``grant`` is ``authorization_code`` (a user in a browser), ``client_credentials`` (machine to
    machine, needs ``client_id`` plus a secret or ``private_key``) or ``jwt_bearer`` (enterprise
    managed, needs ``identity``).

    ``client_name`` is the name sent when this object registers a client dynamically (RFC 7591),
    shown on the consent page and the account page. The storage keeps one registration per
    authorization server, and the tokens belong to it, so when ``storage`` already holds one for
    the server (``FileStorage()`` after ``mcpauth login``, which registers as ``mcpauth``) it is
    reused with its tokens and ``client_name`` is not used: that is what lets a script use the
    tokens of ``mcpauth login`` without a browser. To appear under its own name, a program
    passes a storage of its own.

    Raises (from requests made with it):
        ClientError: discovery, registration, authorization or the token endpoint failed.
    """

    requires_request_body = True
    requires_response_body = False

    def __init__(
        self,
        server_url: str,
        *,
        storage: TokenStorage | None = None,
        client_name: str = "mcpauth client",
        scopes: list[str] | tuple[str, ...] | None = None,
        redirect_uri: str | None = None,
        redirect_handler: RedirectHandler | Callable[[str], str] | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        private_key: PrivateKey | None = None,
        signing_alg: str = "ES256",
        token_endpoint_auth_method: str | None = None,
        client_issuer: str | None = None,
        client_metadata_url: str | None = None,
        grant: Grant | None = None,
        identity: IdentityAssertion | None = None,
        open_browser: bool = True,
        callback_timeout: float = DEFAULT_TIMEOUT,
        refresh_margin: float = 60.0,
        max_attempts: int = 3,
        offline_access: bool = True,
        select_server: ServerSelector | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        config = FlowConfig(
            server_url=server_url,
            grant=grant or ("jwt_bearer" if identity else "authorization_code"),
            credentials=_credentials(
                client_id,
                client_secret,
                private_key,
                token_endpoint_auth_method,
                signing_alg,
                client_issuer,
            ),
            registration=RegistrationOptions(
                client_name=client_name, client_metadata_url=client_metadata_url
            ),
            scopes=tuple(scopes or ()),
            identity=identity,
            refresh_margin=refresh_margin,
            max_attempts=max_attempts,
            offline_access=offline_access,
            clock=clock,
        )
        if select_server is not None:
            config.select_server = select_server
        self.flow = OAuthFlow(config, storage if storage is not None else MemoryStorage())
        self.redirect_handler = _handler(
            redirect_handler, redirect_uri, open_browser, callback_timeout
        )
        self._sync_lock = threading.Lock()
        self._async_lock: anyio.Lock | None = None

    @property
    def tokens(self) -> TokenSet | None:
        """The current tokens (``repr`` never shows them)."""
        return self.flow.tokens

    # -- httpx / httpx2 Auth ----------------------------------------------------------------

    def auth_flow(self, request: Any) -> Generator[Any, Any, None]:
        return self.sync_auth_flow(request)

    def sync_auth_flow(self, request: Any) -> Generator[Any, Any, None]:
        request.read()
        yield from self._bridge(self.flow.request_flow(), request)

    async def async_auth_flow(self, request: Any) -> AsyncGenerator[Any, Any]:
        await request.aread()
        bridge = self._abridge(self.flow.request_flow(), request)
        try:
            wire = await bridge.__anext__()
            while True:
                response = yield wire
                wire = await bridge.asend(response)
        except StopAsyncIteration:
            return

    # -- standalone use (CLI, scripts) -------------------------------------------------------

    def token_sync(
        self, *, force: bool = False, interactive: bool = True, client: httpx.Client | None = None
    ) -> TokenSet:
        """A valid token for the server: stored, refreshed or (if ``interactive``) authorized.

        Raises:
            LoginRequired: only a user could authorize and ``interactive`` is false.
            ClientError: it could not be obtained.
        """
        flow = self.flow.acquire_flow(force=force, interactive=interactive)
        own = httpx.Client(timeout=30.0) if client is None else contextlib.nullcontext(client)
        with own as http:
            bridge = self._bridge(flow, None)
            try:
                wire = next(bridge)
                while True:
                    wire = bridge.send(http.send(wire))
            except StopIteration as stop:
                tokens: TokenSet = stop.value
                return tokens

    def forget(self) -> None:
        """Drop stored tokens and discovery results for this server."""
        self.flow.forget()

    # -- bridges -----------------------------------------------------------------------------

    def _bridge(self, flow: Flow, request: AnyRequest | None) -> Generator[Any, Any, Any]:
        held = False
        try:
            step = next(flow)
            while True:
                result: Any = None
                if isinstance(step, Lock):
                    if not held:
                        self._sync_lock.acquire()
                        held = True
                elif isinstance(step, _Resend):
                    if held:
                        self._sync_lock.release()
                        held = False
                    result = yield from self._resend(request, step)
                elif isinstance(step, HTTPRequest):
                    response = yield _to_wire(request, step)
                    response.read()
                    result = _from_wire(response, with_body=True)
                elif isinstance(step, RedirectURI):
                    result = self.redirect_handler.redirect_uri()
                elif isinstance(step, Authorize):
                    result = self.redirect_handler.authorize(step.url)
                step = flow.send(result)
        except StopIteration as stop:
            return stop.value
        finally:
            if held:
                self._sync_lock.release()

    @staticmethod
    def _resend(request: AnyRequest | None, step: _Resend) -> Generator[Any, Any, HTTPResponse]:
        if request is None:
            raise RuntimeError("this flow has no request to send")
        if step.authorization is not None:
            request.headers["Authorization"] = step.authorization
        response = yield request
        return _from_wire(response, with_body=False)

    async def _abridge(self, flow: Flow, request: AnyRequest) -> AsyncGenerator[Any, Any]:
        if self._async_lock is None:
            self._async_lock = anyio.Lock()
        lock, held = self._async_lock, False
        try:
            step = next(flow)
            while True:
                result: Any = None
                if isinstance(step, Lock):
                    if not held:
                        await lock.acquire()
                        held = True
                elif isinstance(step, _Resend):
                    if held:
                        lock.release()
                        held = False
                    if step.authorization is not None:
                        request.headers["Authorization"] = step.authorization
                    result = _from_wire((yield request), with_body=False)
                elif isinstance(step, HTTPRequest):
                    response = yield _to_wire(request, step)
                    await response.aread()
                    result = _from_wire(response, with_body=True)
                else:
                    result = await self._user_agent(step)
                step = flow.send(result)
        except StopIteration:
            return
        finally:
            if held:
                lock.release()

    async def _user_agent(self, step: Any) -> str:
        handler = self.redirect_handler
        if isinstance(step, RedirectURI):
            return await anyio.to_thread.run_sync(handler.redirect_uri)
        authorize = getattr(handler, "authorize_async", None)
        if authorize is not None and inspect.iscoroutinefunction(authorize):
            result: str = await authorize(step.url)
            return result
        try:
            return await anyio.to_thread.run_sync(
                handler.authorize, step.url, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            handler.cancel()
            raise
