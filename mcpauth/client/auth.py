"""``OAuth``: one object that authenticates ``httpx`` and ``httpx2`` clients for an MCP server.

It is both an :class:`httpx.Auth` and an :class:`httpx2.Auth` (the HTTP client of the official
MCP Python SDK), so it plugs into ``streamable_http_client(url, http_client=...)`` as well as
into scripts. The logic is the sans-I/O flow in :mod:`mcpauth.client.flow`; this module only
carries its steps out: HTTP through the caller's client, storage calls (in a worker thread when
on an event loop and the storage blocks), and the user agent through the redirect handler.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
from collections.abc import AsyncGenerator, Generator
from typing import Any

import anyio
import anyio.to_thread
import httpx  # only to authenticate a caller's httpx client; mcpauth's own calls use httpx2
import httpx2

from mcpauth.client._http import HTTPRequest, HTTPResponse
from mcpauth.client.callback import LoopbackRedirectHandler, RedirectHandler
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.device import ShowUserCode, Wait
from mcpauth.client.flow import (
    Authorize,
    Flow,
    FlowConfig,
    Lock,
    OAuthFlow,
    RedirectURI,
    StorageCall,
)
from mcpauth.client.flow import Resend as _Resend
from mcpauth.client.options import (
    AuthorizationCodeGrant,
    ClientCredentialsGrant,
    DeviceCodeGrant,
    Grant,
    JWTBearerGrant,
    Policy,
    WorkloadIdentityGrant,
)
from mcpauth.client.registration import Registration
from mcpauth.client.storage import MemoryStorage, TokenStorage
from mcpauth.client.tokens import TokenSet

AnyRequest = httpx.Request | httpx2.Request
AnyResponse = httpx.Response | httpx2.Response


def _to_wire(template: AnyRequest | None, step: HTTPRequest) -> AnyRequest:
    """An ``httpx`` or ``httpx2`` request, matching the library of ``template``."""
    cls = httpx.Request if isinstance(template, httpx.Request) else httpx2.Request
    return cls(step.method, step.url, headers=dict(step.headers), content=step.body)


def _from_wire(response: AnyResponse, *, with_body: bool) -> HTTPResponse:
    headers = {k.lower(): v for k, v in response.headers.items()}
    challenges = tuple(response.headers.get_list("www-authenticate"))
    body = response.content if with_body else b""
    return HTTPResponse(response.status_code, headers, body, challenges)


def _apply(request: AnyRequest, step: _Resend) -> None:
    """The credentials of ``step`` on the caller's request: the token, and a DPoP proof for
    this very request when the token is bound (a retry gets a new one)."""
    request.headers.pop("DPoP", None)
    if step.authorization is not None:
        request.headers["Authorization"] = step.authorization
    if step.dpop is not None:
        request.headers["DPoP"] = step.dpop(request.method, str(request.url))


_GRANTS = (
    AuthorizationCodeGrant,
    DeviceCodeGrant,
    ClientCredentialsGrant,
    JWTBearerGrant,
    WorkloadIdentityGrant,
)


class OAuth(httpx.Auth, httpx2.Auth):
    """OAuth 2.1 for MCP servers: discovery, registration, PKCE, refresh, step-up.

    Pass it as ``auth=`` to ``httpx.Client``/``AsyncClient`` or ``httpx2.AsyncClient``.

    Args:
        server_url: the MCP server's URL (the resource).
        credentials: a pre-registered client; ``None`` to use ``registration`` instead.
        registration: how to get a client ID when there are no ``credentials``: a Client ID
            Metadata Document URL, else dynamic registration under ``client_name``.
        storage: where discovery results, registrations and tokens are kept
            (:class:`MemoryStorage` by default; :class:`FileStorage` survives restarts).
        redirect_handler: takes the user to the authorization endpoint and back
            (a :class:`LoopbackRedirectHandler` on an ephemeral port by default).
        grant: :class:`AuthorizationCodeGrant` (default), :class:`DeviceCodeGrant` (RFC 8628:
            the person approves elsewhere, typing the code shown),
            :class:`ClientCredentialsGrant`, :class:`JWTBearerGrant` or
            :class:`WorkloadIdentityGrant`, each with the scopes to ask for.
        policy: refresh margin, retries, server choice, clock and DPoP (sender-constrained
            tokens, on whenever a server offers them).

    The storage keeps one registration per authorization server, and the tokens belong to it:
    when ``storage`` already holds one for the server (``FileStorage()`` after ``mcpauth login``,
    which registers as ``mcpauth``) it is reused with its tokens and ``registration`` is not
    used. That lets a script use the tokens of ``mcpauth login`` without a browser; a program
    that should appear under its own name passes a storage of its own.

    Raises:
        TypeError: ``grant`` is not one of the five grants, or ``redirect_handler`` is not a
            :class:`RedirectHandler` (wrap a function in :class:`CallableRedirectHandler`).

    Raises (from requests made with it):
        ClientError: discovery, registration, authorization or the token endpoint failed.
    """

    requires_request_body = True
    requires_response_body = False

    def __init__(
        self,
        server_url: str,
        *,
        credentials: ClientCredentials | None = None,
        registration: Registration | None = None,
        storage: TokenStorage | None = None,
        redirect_handler: RedirectHandler | None = None,
        grant: Grant | None = None,
        policy: Policy | None = None,
    ) -> None:
        if grant is not None and not isinstance(grant, _GRANTS):
            raise TypeError(
                f"OAuth(grant=...) takes AuthorizationCodeGrant, DeviceCodeGrant, "
                f"ClientCredentialsGrant, JWTBearerGrant or WorkloadIdentityGrant, "
                f"not {type(grant).__name__}"
            )
        if redirect_handler is not None and not isinstance(redirect_handler, RedirectHandler):
            raise TypeError(
                "OAuth(redirect_handler=...) takes a RedirectHandler: wrap a function in "
                "CallableRedirectHandler(redirect_uri, function)"
            )
        config = FlowConfig(
            server_url=server_url,
            grant=grant if grant is not None else AuthorizationCodeGrant(),
            credentials=credentials,
            registration=registration if registration is not None else Registration(),
            policy=policy if policy is not None else Policy(),
        )
        self.flow = OAuthFlow(config, storage if storage is not None else MemoryStorage())
        self.redirect_handler: RedirectHandler = (
            redirect_handler if redirect_handler is not None else LoopbackRedirectHandler()
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
        self,
        *,
        force: bool = False,
        interactive: bool = True,
        client: httpx2.Client | httpx.Client | None = None,
    ) -> TokenSet:
        """A valid token for the server: stored, refreshed or (if ``interactive``) authorized.

        Raises:
            LoginRequired: only a user could authorize and ``interactive`` is false.
            ClientError: it could not be obtained.
        """
        flow = self.flow.acquire_flow(force=force, interactive=interactive)
        own = httpx2.Client(timeout=30.0) if client is None else contextlib.nullcontext(client)
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
                elif isinstance(step, StorageCall):
                    result = step.run()
                elif isinstance(step, _Resend):
                    if held:
                        self._sync_lock.release()
                        held = False
                    result = yield from self._resend(request, step)
                elif isinstance(step, HTTPRequest):
                    response = yield _to_wire(request, step)
                    response.read()
                    result = _from_wire(response, with_body=True)
                else:
                    result = self._user_agent_sync(step)
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
        _apply(request, step)
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
                elif isinstance(step, StorageCall):
                    # a blocking storage (a file) is used from a worker thread, off the event loop
                    result = (
                        await anyio.to_thread.run_sync(step.run) if step.blocking else step.run()
                    )
                elif isinstance(step, _Resend):
                    if held:
                        lock.release()
                        held = False
                    _apply(request, step)
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

    def _user_agent_sync(self, step: Any) -> str | None:
        """The steps that involve the person: the redirect handler's, or the device grant's."""
        if isinstance(step, RedirectURI):
            return self.redirect_handler.redirect_uri()
        if isinstance(step, Authorize):
            return self.redirect_handler.authorize(step.url)
        self._device_step(step)
        return None

    def _device_step(self, step: ShowUserCode | Wait) -> None:
        """The device grant's steps: the code shown as the grant says (stderr by default), or
        the wait between two polls."""
        grant = self.flow.config.grant
        if isinstance(step, Wait):
            time.sleep(step.seconds)
        elif isinstance(grant, DeviceCodeGrant):
            grant.show(step.authorization)

    async def _user_agent(self, step: Any) -> str | None:
        if isinstance(step, Wait):
            await anyio.sleep(step.seconds)
            return None
        if isinstance(step, ShowUserCode):
            self._device_step(step)
            return None
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
