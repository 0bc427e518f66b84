"""``create_app(settings)``: the authorization server as a Starlette application."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpauth.caching import wall_clock
from mcpauth.errors import InvalidRequest, ServerError
from mcpauth.server import discovery
from mcpauth.server.authorization import device_authorization
from mcpauth.server.authorization import endpoint as authorize
from mcpauth.server.browser import (
    account,
    account_links,
    account_security,
    interaction,
    passkey_login,
    second_factor,
    upstream_login,
    verification,
)
from mcpauth.server.browser.pages import (
    Brand,
    BrandMiddleware,
    brand_var,
    error_page,
    favicon,
    passkey_script,
)
from mcpauth.server.browser.sign_in_step import SignInStep
from mcpauth.server.clients import management, registration
from mcpauth.server.config import Settings
from mcpauth.server.context import ServerContext, build_context
from mcpauth.server.http_io import cors, error_response, oauth_errors
from mcpauth.server.operations.audit_trail import (
    FLUSH_INTERVAL,
    AuditTrail,
    AuditTrailMiddleware,
)
from mcpauth.server.operations.logs import RequestIdMiddleware, configure_logging
from mcpauth.server.operations.metrics import AuditCounter, Metrics, MetricsMiddleware
from mcpauth.server.operations.metrics import endpoint as metrics_endpoint
from mcpauth.server.operations.rate_limits import Rate, RateLimitMiddleware
from mcpauth.server.storage import migrate
from mcpauth.server.storage.database import Database, DatabaseError, Engine, make_engine
from mcpauth.server.storage.prune import prune, report, table_rows
from mcpauth.server.threads import run_blocking
from mcpauth.server.tokens import endpoint as token
from mcpauth.server.tokens import introspection, revocation, userinfo
from mcpauth.tracing import tracer as traces
from mcpauth.uris import path_of

log = logging.getLogger("mcpauth.server")


def _middleware(
    settings: Settings,
    db: Database,
    clock: Callable[[], float],
    metrics: Metrics | None,
    token_route: Route,
    routes: list[BaseRoute],
    trail: AuditTrail,
) -> list[Middleware]:
    """Outermost first: the address behind trusted proxies, traces (when on: a span for every
    request, the rate limiter's refusals included), request ids, the audit trail, metrics, then
    rate limits before any endpoint work, then the token endpoint's direct route."""
    stack = []
    if settings.trusted_proxies:
        # uvicorn's, imported only here: an app served by another ASGI server needs no uvicorn
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        # the client address and scheme from X-Forwarded-For/-Proto, believed only from these
        stack.append(
            Middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.trusted_proxies))
        )
    tracer = traces("mcpauth.server")
    if tracer is not None:  # imported only then: nothing of OpenTelemetry when off
        from mcpauth.server.operations.tracing import TracingMiddleware

        stack.append(Middleware(TracingMiddleware, tracer=tracer, routes=routes))
    stack.append(Middleware(RequestIdMiddleware))
    stack.append(Middleware(AuditTrailMiddleware, trail=trail))
    if metrics is not None:
        stack.append(Middleware(MetricsMiddleware, metrics=metrics))
    rates = {
        "/token": Rate(settings.rate_limit_token),
        "/revoke": Rate(settings.rate_limit_token),
        "/introspect": Rate(settings.rate_limit_token),
        "/userinfo": Rate(settings.rate_limit_token),
        "/authorize": Rate(settings.rate_limit_authorize),
        "/register": Rate(settings.rate_limit_register),
        "/login": Rate(settings.rate_limit_login),
        # RFC 8628 §5.2: device requests as registrations (each stores a row); code posts as
        # sign-in posts (each may be a guess)
        "/device_authorization": Rate(settings.rate_limit_register),
        "/device": Rate(settings.rate_limit_login),
    }
    stack.append(
        Middleware(
            RateLimitMiddleware,
            db=db,
            base_path=path_of(settings.issuer),
            rates=rates,
            clock=clock,
        )
    )
    stack.append(Middleware(DirectRoute, route=token_route))
    stack.append(Middleware(BrandMiddleware, brand=brand_of(settings)))  # not on /token
    return stack


def brand_of(settings: Settings) -> Brand:
    """The service's branding on every page (settings ``service_name``, ``logo_url``,
    ``accent_color``)."""
    return Brand(
        service_name=settings.service_name,
        issuer=settings.issuer,
        logo_url=settings.logo_url,
        accent=settings.accent_color,
        favicon_url=f"{path_of(settings.issuer)}/favicon.svg",
        script_url=f"{path_of(settings.issuer)}/passkeys.js",
    )


class DirectRoute:
    """Innermost middleware: a request that fully matches ``route`` (path and method) goes
    straight to the route's ASGI app, past Starlette's exception middleware and router. Used
    for the token endpoint, which every token passes through and which renders its own errors;
    other methods on its path still reach the router (and its 405)."""

    def __init__(self, app: ASGIApp, *, route: Route) -> None:
        self.app = app
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match, child_scope = self.route.matches(scope)
            if match is Match.FULL:
                scope.update(child_scope)
                scope["route"] = self.route
                await self.route.app(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _token_route(settings: Settings) -> Route:
    return Route(f"{path_of(settings.issuer)}/token", token.token, methods=["POST", "OPTIONS"])


def _routes(settings: Settings, token_route: Route) -> list[BaseRoute]:
    base = path_of(settings.issuer)
    metadata = cors(discovery.metadata)
    routes: list[BaseRoute] = [
        token_route,  # also reached directly, by DirectRoute
        # RFC 8414 §3.1 path insertion; OpenID Connect discovery in both path forms
        Route(
            f"/.well-known/oauth-authorization-server{base}", metadata, methods=["GET", "OPTIONS"]
        ),
        Route(f"/.well-known/openid-configuration{base}", metadata, methods=["GET", "OPTIONS"]),
        Route(f"{base}/jwks.json", cors(discovery.jwks), methods=["GET", "OPTIONS"]),
        Route(f"{base}/health", discovery.health, methods=["GET"]),
        Route(f"{base}/health/ready", discovery.ready, methods=["GET"]),
    ]
    routes += [
        Route(f"{base}/authorize", authorize.authorize, methods=["GET", "POST"]),
        Route(f"{base}/revoke", cors(revocation.revoke), methods=["POST", "OPTIONS"]),
        Route(f"{base}/introspect", introspection.introspect, methods=["POST"]),
        Route(f"{base}/userinfo", cors(userinfo.userinfo), methods=["GET", "POST", "OPTIONS"]),
        Route(f"{base}/interaction/{{interaction_id}}", interaction.show, methods=["GET"]),
        Route(f"{base}/interaction/{{interaction_id}}/login", interaction.login, methods=["POST"]),
        Route(
            f"{base}/interaction/{{interaction_id}}/consent", interaction.consent, methods=["POST"]
        ),
        Route(
            # ends in /login: counted with the password sign-in's rate limit
            f"{base}/interaction/{{interaction_id}}/upstream/{{provider_id}}/login",
            upstream_login.start_for_interaction,
            methods=["POST"],
        ),
        Route(
            f"{base}/upstream/{{provider_id}}/callback", upstream_login.callback, methods=["GET"]
        ),
        Route(
            f"{base}/account/upstream/{{provider_id}}/login",
            upstream_login.start_for_account,
            methods=["POST"],
        ),
        Route(
            f"{base}/account/upstream/{{provider_id}}/link",
            upstream_login.start_for_link,
            methods=["POST"],
        ),
        Route(f"{base}/account/unlink", account_links.unlink, methods=["POST"]),
        Route(f"{base}/account", account.page, methods=["GET"]),
        Route(f"{base}/account/login", account.login, methods=["POST"]),
        Route(f"{base}/account/logout", account.logout, methods=["POST"]),
        Route(f"{base}/account/revoke", account.confirm_revoke, methods=["GET"]),
        Route(f"{base}/account/revoke", account.revoke, methods=["POST"]),
        *_console_routes(base),
        Route(f"{base}/favicon.svg", _favicon, methods=["GET"]),
        Route("/favicon.ico", _favicon, methods=["GET"]),  # asked for by browsers on their own
        *_second_factor_routes(base),
    ]
    if base:
        routes.append(
            Route(f"{base}/.well-known/openid-configuration", metadata, methods=["GET", "OPTIONS"])
        )
    if settings.device_flow:
        routes += [
            Route(
                f"{base}/device_authorization",
                cors(device_authorization.device_authorization),
                methods=["POST", "OPTIONS"],
            ),
            Route(f"{base}/device", verification.show, methods=["GET"]),
            Route(f"{base}/device", verification.enter, methods=["POST"]),
        ]
    if settings.registration_policy != "closed":
        routes.append(
            Route(
                f"{base}/register",
                cors(oauth_errors(registration.register)),
                methods=["POST", "OPTIONS"],
            )
        )
        routes.append(
            Route(
                f"{base}/register/{{client_id}}",
                cors(management.configure),
                methods=["GET", "PUT", "DELETE", "OPTIONS"],
            )
        )
    return routes


def _console_page(name: str) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint of the admin console, loaded with the admin API by its first request (a
    server nobody administers through a browser never loads them)."""

    async def endpoint(request: Request) -> Response:
        from mcpauth.server import admin_console

        handler: Callable[[Request], Awaitable[Response]] = getattr(admin_console, name)
        return await handler(request)

    return endpoint


def _console_routes(base: str) -> list[BaseRoute]:
    pages = ("clients", "resources", "users", "keys", "upstream", "audit")
    return [
        Route(f"{base}/admin", _console_page("overview"), methods=["GET"]),
        *(Route(f"{base}/admin/{name}", _console_page(name), methods=["GET"]) for name in pages),
        Route(f"{base}/admin/do/{{action}}", _console_page("act"), methods=["POST"]),
    ]


def _second_factor_routes(base: str) -> list[BaseRoute]:
    """Passkeys and the second step of a sign-in; the posts that sign in end in /login (the
    sign-in rate limit counts them)."""
    return [
        Route(f"{base}/passkeys.js", _passkey_script, methods=["GET"]),
        Route(
            f"{base}/interaction/{{interaction_id}}/passkey/login",
            passkey_login.interaction,
            methods=["POST"],
        ),
        Route(f"{base}/account/passkey/login", passkey_login.account, methods=["POST"]),
        Route(f"{base}/second-factor", second_factor.page, methods=["GET"]),
        Route(f"{base}/second-factor/login", second_factor.submit_code, methods=["POST"]),
        Route(
            f"{base}/second-factor/passkey/login", second_factor.submit_passkey, methods=["POST"]
        ),
        Route(f"{base}/account/totp", account_security.start_totp, methods=["POST"]),
        Route(f"{base}/account/totp/confirm", account_security.confirm_totp, methods=["POST"]),
        Route(f"{base}/account/totp/remove", account_security.remove_totp, methods=["POST"]),
        Route(
            f"{base}/account/recovery-codes",
            account_security.new_recovery_codes,
            methods=["POST"],
        ),
        Route(f"{base}/account/passkeys", account_security.add_passkey, methods=["POST"]),
        Route(f"{base}/account/passkeys/remove", account_security.remove_passkey, methods=["POST"]),
    ]


async def _passkey_script(request: Request) -> Response:
    return passkey_script()


async def _favicon(request: Request) -> Response:
    return favicon(brand_var.get())


def _wants_html(request: Request) -> bool:
    return request.method == "GET" and "text/html" in request.headers.get("accept", "")


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 400
    if status == 404 and _wants_html(request):  # a person who followed a wrong link
        return error_page(
            "not_found",
            "There is no page at this address. Check the link, or go back to the "
            "application you came from.",
            404,
        )
    error = InvalidRequest(
        "Not found" if status == 404 else "Method not allowed" if status == 405 else "Bad request"
    )
    headers = exc.headers if isinstance(exc, HTTPException) else None  # 405's Allow
    response = error_response(error, headers=headers)
    response.status_code = status
    return response


async def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(ServerError("The server hit an unexpected error"))


def prune_once(ctx: ServerContext, metrics: Metrics | None) -> dict[str, int] | None:
    """One pruner run (blocking): delete expired state, log it, and put the rows deleted and
    the rows left per table in the metrics (also when another replica held the lock)."""
    counts = prune(ctx.db, ctx.settings, ctx.now())
    report(counts)
    if metrics is not None:
        if counts:
            metrics.count_pruned(counts)
        metrics.set_table_rows(table_rows(ctx.db))
    return counts


async def _flush_periodically(trail: AuditTrail) -> None:
    """Write the buffered audit events every :data:`FLUSH_INTERVAL` seconds."""
    while True:
        await asyncio.sleep(FLUSH_INTERVAL)
        try:
            await run_blocking(trail.flush)
        except DatabaseError:
            log.exception("writing the audit events failed; trying again")


async def _prune_periodically(ctx: ServerContext, metrics: Metrics | None) -> None:
    """Delete expired state every ``prune_interval`` seconds while the server runs."""
    while True:
        await asyncio.sleep(ctx.settings.prune_interval)
        try:
            await run_blocking(prune_once, ctx, metrics)
        except DatabaseError:
            log.exception("pruning failed; trying again in %d s", ctx.settings.prune_interval)


def create_app(
    settings: Settings,
    *,
    engine: Engine | None = None,
    clock: Callable[[], float] | None = None,
    outbound_ssl_context: ssl.SSLContext | None = None,
    configure_logs: bool = True,
    sign_in: SignInStep | None = None,
) -> Starlette:
    """The authorization server for ``settings``, every field honoured wherever the app is
    served (``mcpauth serve``, uvicorn, another ASGI server): ``trusted_proxies`` by a
    proxy-headers middleware in front of everything, ``log_level`` and ``log_format`` when
    the app starts (its lifespan), on the ``mcpauth`` loggers only; ``configure_logs=False``
    leaves logging to the embedding application. ``outbound_ssl_context`` replaces the trust
    store of every outbound connection (client metadata documents, ``jwks_uri``s, trusted
    issuers' keys, upstream providers; tests pass a private CA); ``outbound_ca_file`` only
    adds to the default one.
    ``sign_in`` replaces the built-in sign-in step (password and upstream providers) with an
    application's own (:class:`~mcpauth.server.browser.sign_in_step.SignInStep`).
    Traces follow the ``OTEL_*`` environment, off when it names no exporter
    (:mod:`mcpauth.tracing`).

    Raises:
        ConfigurationError: the settings or the database are not usable, or the environment
            asks for traces the OpenTelemetry SDK cannot give (not installed, an exporter it
            lacks).
    """
    clock = clock or wall_clock
    own_engine = engine is None
    engine = engine or make_engine(settings.database_url)
    migrate.ensure_schema(engine)
    ctx = build_context(settings, engine, clock=clock, ssl_context=outbound_ssl_context)
    ctx.upstream.check_secrets()
    ctx.keys.ensure_key()
    db = ctx.db

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if configure_logs:
            configure_logging(settings.log_level, settings.log_format)
        pruner = (
            asyncio.create_task(_prune_periodically(ctx, metrics))
            if settings.prune_interval
            else None
        )
        flusher = asyncio.create_task(_flush_periodically(ctx.audit_trail))
        yield
        for task in (pruner, flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        with contextlib.suppress(DatabaseError):
            await run_blocking(ctx.audit_trail.flush)
        if own_engine:
            db.dispose()

    metrics = Metrics() if settings.metrics else None
    token_route = _token_route(settings)
    routes = _routes(settings, token_route)
    if metrics is not None:
        routes.append(Route(f"{path_of(settings.issuer)}/metrics", metrics_endpoint(metrics)))
        audit_logger = logging.getLogger("mcpauth.audit")
        audit_logger.addHandler(AuditCounter(metrics))
        if audit_logger.getEffectiveLevel() > logging.INFO:
            audit_logger.setLevel(logging.INFO)  # counted even when not written
    app = Starlette(
        routes=routes,
        middleware=_middleware(settings, db, clock, metrics, token_route, routes, ctx.audit_trail),
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=lifespan,
    )
    app.state.mcpauth = ctx
    if sign_in is not None:
        if not isinstance(sign_in, SignInStep):
            raise TypeError("sign_in must have async page() and submit() (a SignInStep)")
        app.state.mcpauth_sign_in = sign_in
    return app
