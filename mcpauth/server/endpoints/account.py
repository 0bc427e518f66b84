"""The account page: a signed-in user sees the clients connected to their account and revokes
a grant (its refresh tokens die at once)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.authorization import see_other
from mcpauth.server.context import ServerContext, get_context
from mcpauth.server.html import error_page, render
from mcpauth.server.login import attempt_login, refuse_cross_site
from mcpauth.server.session import (
    BrowserSession,
    csrf_token,
    csrf_valid,
    load_session,
    save_session,
)
from mcpauth.server.storage import grants
from mcpauth.server.storage.accounts import get_client
from mcpauth.server.storage.models import Grant, User
from mcpauth.server.threads import run_blocking

LOGIN_PURPOSE = "login:account"
ACCOUNT_PURPOSE = "account"


def _login_page(
    ctx: ServerContext,
    browser: BrowserSession,
    error: str = "",
    username: str = "",
    status: int = 200,
) -> Response:
    return render(
        "login.html",
        status,
        client_name="",
        error=error,
        username=username,
        action=ctx.endpoint_url("account/login"),
        csrf_token=csrf_token(ctx, browser, LOGIN_PURPOSE),
    )


def _grants_view(ctx: ServerContext, user_id: str) -> tuple[str, list[dict[str, Any]]] | None:
    with ctx.db.read() as session:
        user = session.get(User, user_id)
        if user is None:
            return None
        rows = []
        for grant in grants.user_grants(session, user_id):
            client = get_client(session, grant.client_id)
            rows.append(
                {
                    "client_id": grant.client_id,
                    "client_name": client.client_name
                    if client and client.client_name
                    else "Unnamed client",
                    "resource": grant.resource,
                    "scope": grant.scope,
                    "last_used": datetime.fromtimestamp(grant.last_used_at, UTC).strftime(
                        "%Y-%m-%d %H:%M UTC"
                    ),
                    "revoke_action": ctx.endpoint_url(f"account/grants/{grant.id}/revoke"),
                }
            )
    return user.username, rows


async def page(request: Request) -> Response:
    ctx = get_context(request)
    browser = load_session(ctx, request)
    view = None
    if browser.user_id is not None:
        view = await run_blocking(_grants_view, ctx, browser.user_id)
    if view is None:
        response = _login_page(ctx, browser)
    else:
        username, rows = view
        response = render(
            "account.html",
            username=username,
            grants=rows,
            csrf_token=csrf_token(ctx, browser, ACCOUNT_PURPOSE),
            logout_action=ctx.endpoint_url("account/logout"),
        )
    save_session(ctx, browser, response)
    return response


async def login(request: Request) -> Response:
    ctx = get_context(request)
    browser = load_session(ctx, request)
    outcome = await attempt_login(ctx, request, browser, LOGIN_PURPOSE)
    if isinstance(outcome, Response):
        return outcome
    if outcome.error:
        return _login_page(ctx, browser, outcome.error, outcome.username, outcome.status)
    response = see_other(ctx.endpoint_url("account"))
    save_session(ctx, browser, response)
    return response


async def _refused_form(
    ctx: ServerContext, request: Request, browser: BrowserSession
) -> Response | None:
    """The page refusing an account form (cross-site, signed out, stale token), or None."""
    refused = refuse_cross_site(ctx, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=5, max_part_size=1024)
    token = form.get("csrf_token")
    if browser.user_id is None or not csrf_valid(
        ctx, browser, ACCOUNT_PURPOSE, token if isinstance(token, str) else None
    ):
        return error_page("invalid_request", "The form has expired. Reload the page.", 403)
    return None


def _revoke(ctx: ServerContext, user_id: str, grant_id: str) -> bool:
    with ctx.db.write() as session:
        grant = session.get(Grant, grant_id)
        if grant is None or grant.user_id != user_id:
            return False
        grants.revoke_grant(session.connection(), grant_id, ctx.now())
        grants.forget_consent(session, user_id, grant.client_id, grant.resource)
    return True


async def revoke(request: Request) -> Response:
    ctx = get_context(request)
    browser = load_session(ctx, request)
    refused = await _refused_form(ctx, request, browser)
    if refused is not None:
        return refused
    found = await run_blocking(_revoke, ctx, browser.user_id or "", request.path_params["grant_id"])
    if not found:
        return error_page("invalid_request", "No such connected application.", 404)
    return see_other(ctx.endpoint_url("account"))


async def logout(request: Request) -> Response:
    ctx = get_context(request)
    browser = load_session(ctx, request)
    refused = await _refused_form(ctx, request, browser)
    if refused is not None:
        return refused
    browser.sign_out()
    response = see_other(ctx.endpoint_url("account"))
    save_session(ctx, browser, response)
    return response
