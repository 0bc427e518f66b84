"""The account page's second factors: an authenticator app (TOTP), its recovery codes, and
passkeys. Every change needs a sign-in in the last :data:`~account_links.LINK_MAX_AGE`
seconds, as linking a provider does, so a session left open cannot add or remove a way in.

An app is set up in two steps: a new secret is shown once (a QR code and the key as text) and
stored sealed but inactive; the first code from the app turns it on, and ten recovery codes
are shown, once. A passkey is made on the page by the browser (``static/passkeys.js``) and
checked against the challenge the page carried (``passkey_ceremonies``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.browser import csrf, passkey_ceremonies
from mcpauth.server.browser.account_links import LINK_MAX_AGE, only_way_in
from mcpauth.server.browser.login import (
    address_key,
    locked_for,
    locked_page,
    record_failure,
    refuse_cross_site,
)
from mcpauth.server.browser.outcomes import see_other
from mcpauth.server.browser.pages import error_page, render
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import BrowserSession, load_session
from mcpauth.server.http_io import client_ip
from mcpauth.server.identity import totp
from mcpauth.server.identity.passkeys import PasskeyRefused
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import identities, passkeys, second_factors
from mcpauth.server.storage.database import Session
from mcpauth.server.storage.lookups import get_user, lock_user
from mcpauth.server.storage.models import User
from mcpauth.server.threads import run_blocking

PURPOSE = "account-security"
REGISTER_PURPOSE = "passkey-register"
ACCOUNT = "account"


@dataclass(frozen=True)
class PasskeyView:
    credential_id: str
    name: str
    added: str
    last_used: str | None


@dataclass(frozen=True)
class SecurityView:
    """What the account page shows under "Two-step sign-in"."""

    totp: bool
    recovery_codes: int
    passkeys: list[PasskeyView]
    recent: bool  # the sign-in is recent enough to change any of it
    csrf_token: str
    passkey_options: str | None  # the registration options, when a passkey can be added
    passkey_token: str
    urls: dict[str, str]


def _day(when: int) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d")


def recent(browser: BrowserSession, now: int) -> bool:
    return browser.auth_time is not None and now - browser.auth_time <= LINK_MAX_AGE


def security_view(
    ctx: BrowserServices, session: Session, browser: BrowserSession, user: User, name: str
) -> SecurityView:
    factors = second_factors.factors(session, user.id)
    keys = passkeys.of_user(session, user.id)
    is_recent = recent(browser, ctx.now())
    rp = passkey_ceremonies.relying_party(ctx)
    options = None
    if rp is not None and is_recent and len(keys) < passkeys.MAX_PER_ACCOUNT:
        options = passkey_ceremonies.registration_options(
            ctx,
            rp,
            browser.sid,
            REGISTER_PURPOSE,
            user_id=user.id,
            user_name=name,
            existing=[key.credential_id for key in keys],
        )
    return SecurityView(
        totp=factors.totp,
        recovery_codes=factors.recovery_codes,
        passkeys=[
            PasskeyView(
                key.credential_id,
                key.name,
                _day(key.created_at),
                _day(key.last_used_at) if key.last_used_at else None,
            )
            for key in keys
        ],
        recent=is_recent,
        csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, PURPOSE),
        passkey_options=options,
        passkey_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, REGISTER_PURPOSE),
        urls={
            name: ctx.endpoint_url(f"account/{path}")
            for name, path in (
                ("totp", "totp"),
                ("totp_remove", "totp/remove"),
                ("recovery", "recovery-codes"),
                ("passkey_add", "passkeys"),
                ("passkey_remove", "passkeys/remove"),
            )
        },
    )


NOTICES = {
    "totp-off": "The authenticator app no longer signs you in.",
    "passkey-added": "The passkey is added: you can sign in with it now.",
    "passkey-removed": "The passkey is removed.",
}


# --------------------------------------------------------------------------------------------
# the forms


async def _form(
    ctx: BrowserServices, request: Request, browser: BrowserSession, purpose: str
) -> dict[str, str] | Response:
    """The fields of a genuine, recent account form, or the page refusing it."""
    account = ctx.endpoint_url(ACCOUNT)
    if browser.user_id is None:
        return see_other(account)
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=5, max_part_size=20 * 1024)
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not csrf.csrf_valid(ctx.cookie_secret, browser.sid, purpose, fields.get("csrf_token")):
        return error_page(
            "invalid_request",
            "The account page had expired, so nothing was changed. Reload it and try again.",
            403,
            title="This page has expired",
            back_url=account,
            back_label="Back to your account",
        )
    if not recent(browser, ctx.now()):
        return error_page(
            "access_denied",
            f"Changing how you sign in needs a sign-in in the last {LINK_MAX_AGE // 60} "
            "minutes, so nothing was changed. Sign out, sign in again, and change it then.",
            403,
            title="Sign in again to change this",
            back_url=account,
            back_label="Back to your account",
        )
    return fields


def _account_name(ctx: BrowserServices, user_id: str) -> str:
    with ctx.db.read() as session:
        user = get_user(session, user_id)
        return identities.display_name(session, user) if user else user_id


def _enrolment(ctx: BrowserServices, user_id: str, new: bool) -> totp.Enrolment | None:
    """A new unconfirmed secret (``new``), or the one waiting for its first code; None when
    the account has an app set up already (or no secret waits)."""
    name = _account_name(ctx, user_id)
    key = ctx.second_factor_key
    with ctx.db.write() as session:
        if second_factors.factors(session, user_id).totp:
            return None
        if not new:
            found = second_factors.totp_secret(session, key, user_id, confirmed=False)
            return totp.enrolment_of(found[0], name, ctx.settings.service_name) if found else None
        enrolment = totp.new_enrolment(name, ctx.settings.service_name)
        second_factors.start_totp(session, key, user_id, enrolment.secret, ctx.now())
    return enrolment


def _enrol_page(
    ctx: BrowserServices, browser: BrowserSession, enrolment: totp.Enrolment, error: str = ""
) -> Response:
    import segno

    qr = segno.make(enrolment.uri, error="m").svg_inline(scale=1, omitsize=True, border=4)
    return render(
        "totp_enrol.html",
        error=error,
        qr_svg=qr,
        secret=enrolment.grouped,
        action=ctx.endpoint_url("account/totp/confirm"),
        account_url=ctx.endpoint_url(ACCOUNT),
        csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, PURPOSE),
    )


def _already_on(ctx: BrowserServices) -> Response:
    return see_other(ctx.endpoint_url(ACCOUNT))


async def start_totp(request: Request) -> Response:
    """POST /account/totp: a new secret, shown once."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    fields = await _form(ctx, request, browser, PURPOSE)
    if isinstance(fields, Response):
        return fields
    assert browser.user_id is not None
    enrolment = await run_blocking(_enrolment, ctx, browser.user_id, True)
    return _already_on(ctx) if enrolment is None else _enrol_page(ctx, browser, enrolment)


def _confirm(ctx: BrowserServices, user_id: str, code: str) -> list[str] | None:
    """Turn the waiting secret on with its first code; the new recovery codes, or None."""
    now = ctx.now()
    with ctx.db.write() as session:
        found = second_factors.totp_secret(session, ctx.second_factor_key, user_id, confirmed=False)
        if found is None:
            return None
        step = totp.matching_step(found[0], code, now, after=found[1])
        if step is None or not second_factors.accept_step(session, user_id, step, confirm_at=now):
            return None
        codes = totp.new_recovery_codes()
        digests = [totp.recovery_digest(user_id, value) for value in codes]
        second_factors.replace_recovery_codes(session, user_id, digests, now)
    return codes


def _codes_page(ctx: BrowserServices, codes: list[str], notice: str) -> Response:
    return render(
        "recovery_codes.html", codes=codes, notice=notice, account_url=ctx.endpoint_url(ACCOUNT)
    )


async def confirm_totp(request: Request) -> Response:
    """POST /account/totp/confirm: the app's first code turns it on; the recovery codes."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    fields = await _form(ctx, request, browser, PURPOSE)
    if isinstance(fields, Response):
        return fields
    user_id = browser.user_id or ""
    keys = (f"second-factor:user:{user_id}", address_key(client_ip(request)))
    locked = await run_blocking(locked_for, ctx.db, ctx.now(), keys)
    if locked:
        return locked_page(locked, ctx.endpoint_url(ACCOUNT), ctx.now())
    code = totp.normalise_code(fields.get("code", "")[:64])
    codes = await run_blocking(_confirm, ctx, user_id, code) if code else None
    if codes is None:
        enrolment = await run_blocking(_enrolment, ctx, user_id, False)
        if enrolment is None:
            return _already_on(ctx)
        await run_blocking(record_failure, ctx, keys)
        return _enrol_page(
            ctx, browser, enrolment, "That code didn't work. Enter the code the app shows now."
        )
    audit("account.totp_enabled", user_id=user_id)
    return _codes_page(ctx, codes, "The authenticator app is on: sign-ins now ask for its code.")


def _remove_totp(ctx: BrowserServices, user_id: str) -> bool:
    with ctx.db.write() as session:
        return second_factors.remove_totp(session, user_id)


async def remove_totp(request: Request) -> Response:
    """POST /account/totp/remove"""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    fields = await _form(ctx, request, browser, PURPOSE)
    if isinstance(fields, Response):
        return fields
    if await run_blocking(_remove_totp, ctx, browser.user_id or ""):
        audit("account.totp_removed", user_id=browser.user_id)
    return see_other(ctx.endpoint_url(ACCOUNT) + "?" + urlencode({"notice": "totp-off"}))


def _new_codes(ctx: BrowserServices, user_id: str) -> list[str] | None:
    codes = totp.new_recovery_codes()
    with ctx.db.write() as session:
        if not second_factors.factors(session, user_id).totp:
            return None
        digests = [totp.recovery_digest(user_id, value) for value in codes]
        second_factors.replace_recovery_codes(session, user_id, digests, ctx.now())
    return codes


async def new_recovery_codes(request: Request) -> Response:
    """POST /account/recovery-codes: ten new codes; the old ones stop working."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    fields = await _form(ctx, request, browser, PURPOSE)
    if isinstance(fields, Response):
        return fields
    codes = await run_blocking(_new_codes, ctx, browser.user_id or "")
    if codes is None:
        return see_other(ctx.endpoint_url(ACCOUNT))
    audit("account.recovery_codes_replaced", user_id=browser.user_id)
    return _codes_page(ctx, codes, "New recovery codes are made: the old ones no longer work.")


# --------------------------------------------------------------------------------------------
# passkeys


async def add_passkey(request: Request) -> Response:
    """POST /account/passkeys: the browser's new credential, made for this page's challenge."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    fields = await _form(ctx, request, browser, REGISTER_PURPOSE)
    if isinstance(fields, Response):
        return fields
    rp = passkey_ceremonies.relying_party(ctx)
    account = ctx.endpoint_url(ACCOUNT)
    try:
        if rp is None:
            raise PasskeyRefused("passkeys need an issuer on a domain name")
        await run_blocking(
            passkey_ceremonies.register,
            ctx,
            rp,
            browser.sid,
            REGISTER_PURPOSE,
            fields.get("credential", ""),
            browser.user_id or "",
            f"Passkey added {_day(ctx.now())}",
        )
    except PasskeyRefused as refused:
        passkey_ceremonies.log.warning("passkey registration refused: %s", refused)
        return error_page(
            "invalid_request",
            "The passkey could not be added, so nothing was changed. Try again from your "
            "account page.",
            400,
            title="The passkey wasn't added",
            back_url=account,
            back_label="Back to your account",
        )
    audit("account.passkey_added", user_id=browser.user_id)
    return see_other(account + "?" + urlencode({"notice": "passkey-added"}))


def _remove_passkey(ctx: BrowserServices, user_id: str, credential_id: str) -> bool:
    with ctx.db.write() as session:
        user = lock_user(session, user_id)  # two removals at once: the second counts after
        if user is None:
            return False
        password = ctx.settings.local_accounts and identities.has_password(user.password_hash)
        others = identities.linked_identities(session, user_id)
        if not password and not others and passkeys.count(session, user_id) <= 1:
            raise identities.LastWayIn
        return passkeys.remove(session, user_id, credential_id)


async def remove_passkey(request: Request) -> Response:
    """POST /account/passkeys/remove"""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    fields = await _form(ctx, request, browser, PURPOSE)
    if isinstance(fields, Response):
        return fields
    account = ctx.endpoint_url(ACCOUNT)
    credential_id = fields.get("credential_id", "")[:1400]
    try:
        removed = await run_blocking(_remove_passkey, ctx, browser.user_id or "", credential_id)
    except identities.LastWayIn:
        return only_way_in(account, "This passkey")
    if not removed:
        return see_other(account)
    audit("account.passkey_removed", user_id=browser.user_id)
    return see_other(account + "?" + urlencode({"notice": "passkey-removed"}))
