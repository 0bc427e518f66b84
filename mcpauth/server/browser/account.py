"""The account page: a signed-in user sees each application connected to their account and
revokes one after a confirmation (its grants end and its refresh tokens die at once), and the
ways they sign in (:mod:`mcpauth.server.browser.account_links` links and removes providers)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.oauth import parse_scope
from mcpauth.server.browser import csrf, passkey_login
from mcpauth.server.browser.account_links import SignInMethods, sign_in_methods
from mcpauth.server.browser.account_security import NOTICES, SecurityView, security_view
from mcpauth.server.browser.display import ClientView, scope_words
from mcpauth.server.browser.interaction import client_view_of
from mcpauth.server.browser.login import attempt_login, provider_buttons, refuse_cross_site
from mcpauth.server.browser.outcomes import see_other
from mcpauth.server.browser.pages import error_page, render
from mcpauth.server.browser.second_factor import after_first_factor
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import (
    BrowserSession,
    load_session,
    save_session,
    sign_out,
)
from mcpauth.server.config import Settings
from mcpauth.server.identity import methods
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store, identities, upstream_tokens
from mcpauth.server.storage.database import Database, Session
from mcpauth.server.storage.lookups import get_client, get_resource, get_user
from mcpauth.server.storage.models import Grant
from mcpauth.server.threads import run_blocking

LOGIN_PURPOSE = "login:account"
ACCOUNT_PURPOSE = "account"


def _login_page(
    ctx: BrowserServices,
    browser: BrowserSession,
    error: str = "",
    username: str = "",
    status: int = 200,
    notice: str = "",
) -> Response:
    passkey = passkey_login.options(ctx, browser, "account")
    return render(
        "login.html",
        status,
        scripts=passkey is not None,
        passkey_options=passkey,
        passkey_action=ctx.endpoint_url("account/passkey/login"),
        client_name="",
        notice=notice,
        error=error,
        username=username,
        action=ctx.endpoint_url("account/login"),
        csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, LOGIN_PURPOSE),
        local_accounts=ctx.settings.local_accounts,
        providers=provider_buttons(ctx, browser, "account"),
    )


@dataclass
class Access:
    resource_name: str
    scopes: str


@dataclass
class Application:
    """One connected application: every live grant of the user for one client."""

    client: ClientView
    access: list[Access]
    last_used: str
    revoke_url: str


def _applications(
    settings: Settings, session: Session, user_id: str, only: str | None = None
) -> list[Application]:
    by_client: dict[str, list[Grant]] = {}
    for grant in grant_store.user_grants(session, user_id):
        if only is None or grant.client_id == only:
            by_client.setdefault(grant.client_id, []).append(grant)
    apps = []
    for client_id, rows in by_client.items():
        client = get_client(session, client_id)
        if client is None:
            continue
        scopes: dict[str, set[str]] = {}
        for grant in rows:
            scopes.setdefault(grant.resource, set()).update(parse_scope(grant.scope))
        access = []
        for uri, granted in scopes.items():
            resource = get_resource(session, uri)
            names = resource.scopes if resource else {}
            access.append(
                Access(
                    resource.name if resource and resource.name else uri,
                    ", ".join(scope_words(s, names) or s for s in sorted(granted)),
                )
            )
        used = max(grant.last_used_at for grant in rows)
        apps.append(
            Application(
                client_view_of(client),
                access,
                datetime.fromtimestamp(used, UTC).strftime("%Y-%m-%d %H:%M UTC"),
                settings.endpoint_url("account/revoke") + "?" + urlencode({"client_id": client_id}),
            )
        )
    return apps


def _account_view(
    ctx: BrowserServices, browser: BrowserSession, query: dict[str, str]
) -> tuple[str, list[Application], str, SignInMethods, SecurityView] | None:
    assert browser.user_id is not None
    with ctx.db.read() as session:
        user = get_user(session, browser.user_id)
        if user is None:
            return None
        notice = ""
        names = {provider.id: provider.name for provider in ctx.upstream}
        if "revoked" in query:
            client = get_client(session, query["revoked"])
            name = client_view_of(client).name if client else "The application"
            notice = f"Access for {name} was revoked."
        elif query.get("linked") in names:
            notice = f"{names[query['linked']]} is linked: you can sign in with it now."
        elif query.get("unlinked") in names:
            notice = f"{names[query['unlinked']]} no longer signs you in to this account."
        elif query.get("notice") in NOTICES:
            notice = NOTICES[query["notice"]]
        name = identities.display_name(session, user)
        return (
            name,
            _applications(ctx.settings, session, browser.user_id),
            notice,
            sign_in_methods(ctx, session, browser, user),
            security_view(ctx, session, browser, user, name),
        )


async def page(request: Request) -> Response:
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    view = None
    if browser.user_id is not None:
        query = {k: v[:200] for k, v in request.query_params.items()}
        view = await run_blocking(_account_view, ctx, browser, query)
    if view is None:
        notice = "You have signed out." if "signed_out" in request.query_params else ""
        response = _login_page(ctx, browser, notice=notice)
    else:
        username, apps, notice, methods, security = view
        response = render(
            "account.html",
            scripts=security.passkey_options is not None,
            username=username,
            apps=apps,
            notice=notice,
            methods=methods,
            security=security,
            csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, ACCOUNT_PURPOSE),
            logout_action=ctx.endpoint_url("account/logout"),
        )
    save_session(ctx, browser, response)
    return response


def _application(ctx: BrowserServices, user_id: str, client_id: str) -> Application | None:
    with ctx.db.read() as session:
        found = _applications(ctx.settings, session, user_id, only=client_id)
    return found[0] if found else None


async def confirm_revoke(request: Request) -> Response:
    """Ask before revoking: what the application loses, a confirm button, a way back."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    client_id = request.query_params.get("client_id", "")
    if browser.user_id is None:
        return see_other(ctx.endpoint_url("account"))
    app = await run_blocking(_application, ctx, browser.user_id, client_id)
    if app is None:
        return _no_such_application(ctx.settings)
    return render(
        "revoke.html",
        app=app,
        action=ctx.endpoint_url("account/revoke"),
        account_url=ctx.endpoint_url("account"),
        csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, ACCOUNT_PURPOSE),
    )


def _no_such_application(settings: Settings) -> Response:
    return error_page(
        "invalid_request",
        "This application is not connected to your account (any more).",
        404,
        title="Application not found",
        back_url=settings.endpoint_url("account"),
        back_label="Back to your applications",
    )


async def login(request: Request) -> Response:
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    outcome = await attempt_login(
        ctx, request, browser, LOGIN_PURPOSE, retry_url=ctx.endpoint_url("account")
    )
    if isinstance(outcome, Response):
        return outcome
    if outcome.error or outcome.user_id is None:
        return _login_page(ctx, browser, outcome.error, outcome.username, outcome.status)
    response = await after_first_factor(
        ctx, request, browser, outcome.user_id, methods.PASSWORD, None
    )
    save_session(ctx, browser, response)
    return response


async def _refused_form(
    ctx: BrowserServices, request: Request, browser: BrowserSession
) -> Response | None:
    """The page refusing an account form (cross-site, signed out, stale token), or None."""
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=5, max_part_size=1024)
    if browser.user_id is None or not csrf.csrf_valid(
        ctx.cookie_secret, browser.sid, ACCOUNT_PURPOSE, form.get("csrf_token")
    ):
        return error_page("invalid_request", "The form has expired. Reload the page.", 403)
    return None


def _revoke(db: Database, now: int, user_id: str, client_id: str) -> bool:
    """Revoke every grant of the user for the client and forget the consents; the person's
    kept upstream tokens go too (an application they no longer trust may have used them
    through token exchange; the next sign-in keeps fresh ones)."""
    with db.write() as session:
        rows = [g for g in grant_store.user_grants(session, user_id) if g.client_id == client_id]
        for grant in rows:
            grant_store.revoke_grant(session, grant.id, now)
            grant_store.forget_consent(session, user_id, grant.client_id, grant.resource)
        if rows:
            upstream_tokens.forget(session, user_id)
    return bool(rows)


async def revoke(request: Request) -> Response:
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    refused = await _refused_form(ctx, request, browser)
    if refused is not None:
        return refused
    client_id = (await request.form()).get("client_id")
    if not isinstance(client_id, str) or not client_id:
        return _no_such_application(ctx.settings)
    found = await run_blocking(_revoke, ctx.db, ctx.now(), browser.user_id or "", client_id)
    if not found:
        return _no_such_application(ctx.settings)
    audit("account.revoked", user_id=browser.user_id, client_id=client_id)
    return see_other(ctx.endpoint_url("account") + "?" + urlencode({"revoked": client_id}))


async def logout(request: Request) -> Response:
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    refused = await _refused_form(ctx, request, browser)
    if refused is not None:
        return refused
    await run_blocking(sign_out, ctx.db, browser)
    response = see_other(ctx.endpoint_url("account") + "?signed_out=1")
    save_session(ctx, browser, response)
    return response
