"""The second step of a sign-in, and the step up to one (docs/security.md T46-T49).

After a password, an account with a second factor (a TOTP app, a passkey) is not signed in
yet: the browser session is *half* signed in, a row bound to its session id that lives
:data:`PENDING_TTL` seconds, and the second-factor page asks for a code (a TOTP code or a
recovery code) or a passkey. Only then is the session signed in, under a new id, with both
methods in its ``amr``. The same page steps a signed-in session up when a resource (or the
server) requires two factors and the sign-in had one; an account without a second factor is
told, in words, to set one up on its account page.

Codes are throttled like passwords: per account and per address, through the database, with
the same limits and lockout pages."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.browser import csrf, passkey_ceremonies
from mcpauth.server.browser.login import (
    address_key,
    expired_form,
    locked_for,
    locked_page,
    login_limits,
    record_failure,
    refuse_cross_site,
)
from mcpauth.server.browser.outcomes import see_other
from mcpauth.server.browser.pages import error_page, render
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import BrowserSession, load_session, save_session, sign_in
from mcpauth.server.crypto import digest
from mcpauth.server.http_io import client_ip
from mcpauth.server.identity import methods, totp
from mcpauth.server.identity.passkeys import PasskeyRefused
from mcpauth.server.operations import lockout
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store, lookups, passkeys, second_factors
from mcpauth.server.storage.database import Database, Session
from mcpauth.server.storage.models import PendingSignIn
from mcpauth.server.storage.second_factors import Factors
from mcpauth.server.threads import run_blocking

PENDING_TTL = 300  # seconds a half-finished sign-in waits for its second factor
PURPOSE = "second-factor"
PAGE = "second-factor"
_MAX_CODE = 64  # a typed code longer than this is neither kind


def _purpose(row: PendingSignIn) -> str:
    """The passkey challenge's purpose: this half-finished sign-in (its account, methods and
    start), so a challenge shown for one cannot answer another in the same session."""
    return f"{PURPOSE}:{row.user_id}:{row.amr}:{row.created_at}"


def _offers(amr: str, factors: Factors) -> tuple[bool, bool]:
    """Which second factors complete a sign-in made with ``amr``: (a code, a passkey). A
    passkey does not second a passkey; a code needs a TOTP secret (recovery codes come with
    it)."""
    return factors.totp, factors.passkeys > 0 and methods.HARDWARE_KEY not in amr.split()


def _disabled(db: Database, user_id: str) -> bool:
    with db.read() as session:
        user = lookups.get_user(session, user_id)
        return user is not None and user.disabled


def _factors(db: Database, user_id: str) -> Factors:
    with db.read() as session:
        return second_factors.factors(session, user_id)


def _start(
    ctx: BrowserServices, sid: str, user_id: str, amr: str, interaction_id: str | None
) -> None:
    now = ctx.now()
    with ctx.db.write() as session:
        second_factors.start_pending(
            session, digest(sid), user_id, amr, interaction_id, now, now + PENDING_TTL
        )


def _continue_url(ctx: BrowserServices, interaction_id: str | None) -> str:
    return ctx.endpoint_url(f"interaction/{interaction_id}" if interaction_id else "account")


def _signed_in(
    ctx: BrowserServices, browser: BrowserSession, user_id: str, amr: str, interaction: str | None
) -> None:
    """Sign the session in (a new id) and move a pending authorization request with it."""
    sign_in(ctx, browser, user_id, amr)
    if interaction is not None:
        with ctx.db.write() as session:
            grant_store.rebind_interaction(session, interaction, browser.sid)


async def after_first_factor(
    ctx: BrowserServices,
    request: Request,
    browser: BrowserSession,
    user_id: str,
    amr: str,
    interaction_id: str | None,
    *,
    upstream: bool = False,
) -> Response:
    """A first factor (``amr``, or a sign-in through an upstream provider: ``upstream``,
    which names no method of ours) proved ``user_id``: on to the second-factor page when the
    account has one that completes it, else signed in and on to ``interaction_id`` (or the
    account page). A sign-in step of an application's own (no method of ours) is complete.
    A disabled account (``mcpauth users disable``) gets a page saying so, and no session."""
    if await run_blocking(_disabled, ctx.db, user_id):
        audit("login.disabled", user_id=user_id, address=client_ip(request))
        return error_page(
            "access_denied",
            "This account is disabled, so it cannot sign in. Ask the administrators.",
            403,
            title="This account is disabled",
        )
    first = upstream or bool(set(amr.split()) & {methods.PASSWORD, methods.HARDWARE_KEY})
    if first and not methods.has_two_factors(amr):
        factors = await run_blocking(_factors, ctx.db, user_id)
        if any(_offers(amr, factors)):
            await run_blocking(_start, ctx, browser.sid, user_id, amr, interaction_id)
            audit("login.first_factor", user_id=user_id, address=client_ip(request), amr=amr)
            return see_other(ctx.endpoint_url(PAGE))
    await run_blocking(_signed_in, ctx, browser, user_id, amr, interaction_id)
    audit("login.success", user_id=user_id, address=client_ip(request), amr=amr)
    return see_other(_continue_url(ctx, interaction_id))


def step_up(
    ctx: BrowserServices, browser: BrowserSession, interaction_id: str, needed_by: str
) -> Response:
    """A signed-in session without two factors meets a request that needs them (``needed_by``
    names the resource): the second-factor page, or a page saying how to set one up. Runs in
    a worker thread."""
    assert browser.user_id is not None
    factors = _factors(ctx.db, browser.user_id)
    if not any(_offers(browser.amr, factors)):
        return render(
            "mfa_setup_needed.html",
            403,
            needed_by=needed_by,
            account_url=ctx.endpoint_url("account"),
            retry_url=ctx.endpoint_url(f"interaction/{interaction_id}"),
        )
    _start(ctx, browser.sid, browser.user_id, browser.amr, interaction_id)
    return see_other(ctx.endpoint_url(PAGE))


# --------------------------------------------------------------------------------------------
# the page


def _pending(ctx: BrowserServices, sid: str) -> tuple[PendingSignIn, Factors, list[str]] | None:
    with ctx.db.read() as session:
        row = second_factors.pending(session, digest(sid), ctx.now())
        if row is None:
            return None
        keys = [p.credential_id for p in passkeys.of_user(session, row.user_id)]
        return row, second_factors.factors(session, row.user_id), keys


def _expired(ctx: BrowserServices) -> Response:
    return expired_form(
        "The sign-in waited too long for its second step, or was finished in another tab, "
        "so nothing was done. Sign in again.",
        ctx.endpoint_url("account"),
        "Sign in again",
    )


def _page(
    ctx: BrowserServices,
    browser: BrowserSession,
    loaded: tuple[PendingSignIn, Factors, list[str]],
    error: str = "",
) -> Response:
    row, factors, keys = loaded
    code, passkey = _offers(row.amr, factors)
    rp = passkey_ceremonies.relying_party(ctx)
    options = (
        passkey_ceremonies.sign_in_options(ctx, rp, browser.sid, _purpose(row), keys)
        if passkey and rp is not None
        else None
    )
    return render(
        "second_factor.html",
        scripts=options is not None,
        error=error,
        step_up=browser.user_id is not None,
        code=code,
        recovery_codes=factors.recovery_codes,
        passkey_options=options,
        action=ctx.endpoint_url(f"{PAGE}/login"),
        passkey_action=ctx.endpoint_url(f"{PAGE}/passkey/login"),
        csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, PURPOSE),
    )


async def page(request: Request) -> Response:
    """GET /second-factor"""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    loaded = await run_blocking(_pending, ctx, browser.sid)
    response = _expired(ctx) if loaded is None else _page(ctx, browser, loaded)
    save_session(ctx, browser, response)
    return response


# --------------------------------------------------------------------------------------------
# the answers


_LOCKED = "locked"


def _check_code(ctx: BrowserServices, user_id: str, typed: str) -> bool | str:
    """Whether ``typed`` is a TOTP code not used before or an unused recovery code of
    ``user_id``; either is spent by this check. The attempt is counted against the account
    before the check, in the same transaction (so concurrent guesses stay within
    ``login_max_failures``), and the count cleared by a success; ``_LOCKED`` when the
    account may not try now (nothing was checked)."""
    now = ctx.now()
    key, limit = _keys_of(user_id), login_limits(ctx.settings)[0]
    with ctx.db.write() as session:
        attempt = lockout.take_attempt(session, key, now, limit)
        if attempt is None:
            return _LOCKED
        good = _matches(ctx, session, user_id, typed, now)
        if good:
            lockout.clear(session, key)
        else:
            lockout.failed_attempt(session, key, now, limit, attempt)
        return good


def _matches(ctx: BrowserServices, session: Session, user_id: str, typed: str, now: int) -> bool:
    six = totp.normalise_code(typed)
    if six is not None:
        found = second_factors.totp_secret(session, ctx.second_factor_key, user_id, confirmed=True)
        if found is None:
            return False
        secret, last_step = found
        step = totp.matching_step(secret, six, now, after=last_step)
        return step is not None and second_factors.accept_step(
            session, user_id, step, confirm_at=None
        )
    if totp.normalise_recovery_code(typed) is None:
        return False
    return second_factors.use_recovery_code(
        session, user_id, totp.recovery_digest(user_id, typed), now
    )


def _finish(
    ctx: BrowserServices, browser: BrowserSession, row: PendingSignIn, second: list[str]
) -> str | None:
    """Take the pending sign-in ``row`` the answer was checked for (once, and only if it is
    still the session's) and sign the session in with both factors; the URL to go on to, or
    None when it was gone or replaced."""
    with ctx.db.write() as session:
        taken = second_factors.take_pending(session, row, ctx.now())
    if not taken:
        return None
    _signed_in(
        ctx, browser, row.user_id, methods.with_second_factor(row.amr, second), row.interaction_id
    )
    return _continue_url(ctx, row.interaction_id)


async def _posted(
    ctx: BrowserServices, request: Request, browser: BrowserSession, field: str
) -> str | Response:
    """The form's ``field`` when the post is genuine (same site, this session's token)."""
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=5, max_part_size=20 * 1024)
    value = form.get(field)
    if not csrf.csrf_valid(ctx.cookie_secret, browser.sid, PURPOSE, form.get("csrf_token")):
        return expired_form(
            "The page had expired or was sent twice, so nothing was done.",
            ctx.endpoint_url(PAGE),
            "Try again",
        )
    return value if isinstance(value, str) else ""


def _keys_of(user_id: str) -> str:
    return f"second-factor:user:{user_id}"


def _keys(user_id: str, request: Request) -> tuple[str, str]:
    return _keys_of(user_id), address_key(client_ip(request))


async def _answered(
    ctx: BrowserServices,
    request: Request,
    browser: BrowserSession,
    loaded: tuple[PendingSignIn, Factors, list[str]],
    second: list[str] | None,
    error: str,
    *,
    account_counted: bool = False,
) -> Response:
    """Where a checked answer leads: on (``second`` holds its methods), or the page again
    (the failure counted against the address, and the account unless ``account_counted``)."""
    row = loaded[0]
    keys = _keys(row.user_id, request)
    if second is None:
        await run_blocking(record_failure, ctx, (None, keys[1]) if account_counted else keys)
        audit("login.second_factor_failure", user_id=row.user_id, address=client_ip(request))
        return _page(ctx, browser, loaded, error)
    await run_blocking(_clear, ctx.db, keys[0])
    url = await run_blocking(_finish, ctx, browser, row, second)
    if url is None:
        return _expired(ctx)
    audit("login.success", user_id=browser.user_id, address=client_ip(request), amr=browser.amr)
    return see_other(url)


def _clear(db: Database, key: str) -> None:
    with db.write() as session:
        lockout.clear(session, key)


async def _guarded(
    ctx: BrowserServices, request: Request, browser: BrowserSession, field: str
) -> tuple[str, tuple[PendingSignIn, Factors, list[str]]] | Response:
    """The posted ``field`` and the pending sign-in it answers, or the refusal: a forged or
    stale form, no pending sign-in, a locked account or address."""
    value = await _posted(ctx, request, browser, field)
    if isinstance(value, Response):
        return value
    loaded = await run_blocking(_pending, ctx, browser.sid)
    if loaded is None:
        return _expired(ctx)
    locked = await run_blocking(locked_for, ctx.db, ctx.now(), _keys(loaded[0].user_id, request))
    if locked:
        audit("login.locked", user_id=loaded[0].user_id, address=client_ip(request))
        return locked_page(locked, ctx.endpoint_url(PAGE), ctx.now())
    return value, loaded


async def submit_code(request: Request) -> Response:
    """POST /second-factor/login: a TOTP code or a recovery code."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    guarded = await _guarded(ctx, request, browser, "code")
    if isinstance(guarded, Response):
        return guarded
    typed, loaded = guarded
    typed = typed.strip()[:_MAX_CODE]
    if not _offers(loaded[0].amr, loaded[1])[0]:  # a code does not second this sign-in
        response = _page(ctx, browser, loaded, "A code can't be used for this sign-in.")
    elif not typed:
        response = _page(ctx, browser, loaded, "Enter the code.")
    else:
        checked = await run_blocking(_check_code, ctx, loaded[0].user_id, typed)
        if checked == _LOCKED:  # the account's attempts ran out while this one waited
            locked = await run_blocking(
                locked_for, ctx.db, ctx.now(), _keys(loaded[0].user_id, request)
            )
            audit("login.locked", user_id=loaded[0].user_id, address=client_ip(request))
            response = locked_page(max(locked, 1), ctx.endpoint_url(PAGE), ctx.now())
        else:
            good = checked is True
            second = [methods.ONE_TIME_CODE] if good else None
            if good and totp.normalise_code(typed) is None:
                audit("login.recovery_code_used", user_id=loaded[0].user_id)
            response = await _answered(
                ctx,
                request,
                browser,
                loaded,
                second,
                "That code didn't work. Check it and try again.",
                account_counted=True,
            )
    save_session(ctx, browser, response)
    return response


async def submit_passkey(request: Request) -> Response:
    """POST /second-factor/passkey/login: an assertion of one of the account's passkeys."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    guarded = await _guarded(ctx, request, browser, "credential")
    if isinstance(guarded, Response):
        return guarded
    credential, loaded = guarded
    rp = passkey_ceremonies.relying_party(ctx)
    second: list[str] | None = None
    if not _offers(loaded[0].amr, loaded[1])[1]:  # a passkey does not second a passkey
        response = _page(ctx, browser, loaded, "A passkey can't be used for this sign-in.")
        save_session(ctx, browser, response)
        return response
    if rp is not None and credential:
        try:
            used = await run_blocking(
                passkey_ceremonies.check_assertion,
                ctx,
                rp,
                browser.sid,
                _purpose(loaded[0]),
                credential,
                loaded[0].user_id,
            )
            second = methods.passkey(used.user_verified)
        except PasskeyRefused as refused:
            passkey_ceremonies.log.warning("passkey refused: %s", refused)
    response = await _answered(
        ctx, request, browser, loaded, second, "That passkey didn't work. Try again."
    )
    save_session(ctx, browser, response)
    return response
