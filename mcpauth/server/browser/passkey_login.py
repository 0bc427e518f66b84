"""Sign-in with a passkey, without a name: the sign-in page (of an authorization request or of
the account page) carries the options of ``navigator.credentials.get()`` with no allowed
credentials, so the authenticator offers the discoverable credentials it holds for this
server; the assertion posted back names the passkey, and so the account. A refused assertion
counts against the address like a wrong password. What follows is what follows a password:
the second step when the account has a TOTP app and the passkey did not verify the person,
else the session is signed in (``second_factor.after_first_factor``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.browser import csrf, passkey_ceremonies
from mcpauth.server.browser.login import (
    address_key,
    expired_sign_in,
    locked_for,
    locked_page,
    record_failure,
    refuse_cross_site,
)
from mcpauth.server.browser.pages import error_page
from mcpauth.server.browser.second_factor import after_first_factor
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import BrowserSession, load_session, save_session
from mcpauth.server.http_io import client_ip
from mcpauth.server.identity import methods
from mcpauth.server.identity.passkeys import PasskeyRefused
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.database import Database
from mcpauth.server.threads import run_blocking


def purpose(target: str) -> str:
    """The challenge's purpose on the sign-in page of ``target`` (an interaction id, or
    ``account``)."""
    return f"passkey-login:{target}"


def options(ctx: BrowserServices, browser: BrowserSession, target: str) -> str | None:
    """The options a sign-in page carries; None when passkeys cannot work here."""
    rp = passkey_ceremonies.relying_party(ctx)
    if rp is None:
        return None
    return passkey_ceremonies.sign_in_options(ctx, rp, browser.sid, purpose(target), [])


def _belongs(db: Database, now: int, interaction_id: str, sid: str) -> bool:
    with db.read() as session:
        interaction = grant_store.live_interaction(session, interaction_id, now)
    return interaction is not None and interaction.request.get("sid") == sid


def _refused(ctx: BrowserServices, retry_url: str) -> Response:
    return error_page(
        "access_denied",
        "That passkey didn't sign you in: it isn't registered here, or it was made for "
        "another site. Try again, or sign in another way.",
        400,
        title="The passkey didn't work",
        back_url=retry_url,
        back_label="Back to sign-in",
    )


async def _sign_in(
    ctx: BrowserServices, request: Request, interaction_id: str | None, retry_url: str
) -> Response:
    """The passkey sign-in of an interaction's page (``interaction_id``) or the account's."""
    target = interaction_id or "account"
    csrf_purpose = f"login:{target}"  # the page's sign-in forms share their token
    browser = await load_session(ctx, request)
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=5, max_part_size=20 * 1024)
    credential = form.get("credential")
    if not csrf.csrf_valid(ctx.cookie_secret, browser.sid, csrf_purpose, form.get("csrf_token")):
        return expired_sign_in(retry_url)
    if interaction_id is not None and not await run_blocking(
        _belongs, ctx.db, ctx.now(), interaction_id, browser.sid
    ):
        return expired_sign_in(retry_url)
    keys = (None, address_key(client_ip(request)))  # the account is not known before
    locked = await run_blocking(locked_for, ctx.db, ctx.now(), keys)
    if locked:
        return locked_page(locked, retry_url, ctx.now())
    rp = passkey_ceremonies.relying_party(ctx)
    try:
        if rp is None or not isinstance(credential, str) or not credential:
            raise PasskeyRefused("no credential, or passkeys are off at this issuer")
        used = await run_blocking(
            passkey_ceremonies.check_assertion,
            ctx,
            rp,
            browser.sid,
            purpose(target),
            credential,
            None,
        )
    except PasskeyRefused as refusal:
        passkey_ceremonies.log.warning("passkey sign-in refused: %s", refusal)
        await run_blocking(record_failure, ctx, keys)
        audit("login.failure", method="passkey", address=client_ip(request))
        return _refused(ctx, retry_url)
    amr = methods.joined(methods.passkey(used.user_verified))
    response = await after_first_factor(ctx, request, browser, used.user_id, amr, interaction_id)
    save_session(ctx, browser, response)
    return response


async def interaction(request: Request) -> Response:
    """POST /interaction/{id}/passkey/login"""
    ctx = browser_services(request)
    interaction_id = request.path_params["interaction_id"]
    retry = ctx.endpoint_url(f"interaction/{interaction_id}")
    return await _sign_in(ctx, request, interaction_id, retry)


async def account(request: Request) -> Response:
    """POST /account/passkey/login"""
    ctx = browser_services(request)
    return await _sign_in(ctx, request, None, ctx.endpoint_url("account"))
