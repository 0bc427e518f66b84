"""Password sign-in shared by the authorization interaction and the account page: Origin and
CSRF checks, throttling per account and per client IP through the database, argon2id
verification off the event loop (docs/security.md T10, T20); refused outright when
``local_accounts`` is off. Also the upstream providers' buttons both pages show."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.browser import csrf
from mcpauth.server.browser.pages import error_page, render
from mcpauth.server.browser.services import BrowserServices
from mcpauth.server.browser.sessions import BrowserSession
from mcpauth.server.config import Settings
from mcpauth.server.crypto import digest
from mcpauth.server.http_io import client_ip
from mcpauth.server.operations import lockout
from mcpauth.server.operations.logs import audit
from mcpauth.server.operations.size_limits import (
    MAX_PASSWORD_LENGTH,
    MAX_USERNAME_LENGTH,
    address_in_key,
)
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.lookups import user_by_name
from mcpauth.server.threads import run_blocking
from mcpauth.uris import origin

IP_FAILURES_PER_ACCOUNT_LIMIT = 4  # an address may fail this many times more than one account


@dataclass(frozen=True)
class ProviderButton:
    """One upstream provider's button: a form POST with its own CSRF token."""

    name: str
    action: str
    csrf_token: str


def upstream_purpose(target: str) -> str:
    """The CSRF purpose of the provider buttons for ``target``: an interaction id, or
    ``account``."""
    return f"upstream:{target}"


def provider_buttons(
    ctx: BrowserServices, browser: BrowserSession, target: str
) -> list[ProviderButton]:
    """The buttons starting sign-in through each upstream provider, for an interaction's
    sign-in page (``target`` its id) or the account page (``target`` ``account``)."""
    base = f"interaction/{target}/upstream" if target != "account" else "account/upstream"
    token = csrf.csrf_token(ctx.cookie_secret, browser.sid, upstream_purpose(target))
    return [
        ProviderButton(provider.name, ctx.endpoint_url(f"{base}/{provider.id}/login"), token)
        for provider in ctx.upstream
    ]


@dataclass
class LoginOutcome:
    user_id: str | None = None
    error: str = ""
    username: str = ""
    status: int = 200


def refuse_cross_site(issuer: str, request: Request) -> Response | None:
    """The page for a form POST that did not come from this server's own pages (logged with
    its reason), or None when it did (see :mod:`mcpauth.server.browser.csrf`)."""
    reason = csrf.cross_site_reason(request.headers, origin(issuer))
    if reason is None:
        return None
    csrf.refuse_logged(reason, request.url.path)
    return error_page(
        "invalid_request",
        "This form was sent from another website, so it was refused. "
        "Go back to the application and start again.",
        403,
        title="This form came from another website",
    )


def expired_form(description: str, back_url: str | None, back_label: str) -> Response:
    """403 for a form whose CSRF token is not this session's for it (an old page, a form sent
    twice): ``description`` says that nothing was done, and a link goes back."""
    return error_page(
        "invalid_request",
        description,
        403,
        title="This page has expired",
        back_url=back_url,
        back_label=back_label,
    )


def expired_sign_in(retry_url: str) -> Response:
    """:func:`expired_form` for a sign-in form, the built-in one or an application's own."""
    return expired_form(
        "The sign-in form had expired or was sent twice, so nothing was done.",
        retry_url,
        "Sign in again",
    )


def locked_page(seconds: int, retry_url: str, now: int) -> Response:
    """429 with the wait in words, the time it ends and a way to try again."""
    minutes = -(-seconds // 60)
    wait = f"{seconds} seconds" if seconds < 120 else f"about {minutes} minutes"
    until = datetime.fromtimestamp(now + seconds, UTC).strftime("%H:%M:%S UTC")
    page = render("locked.html", 429, wait=wait, until=until, retry_url=retry_url)
    page.headers["Retry-After"] = str(seconds)
    return page


def account_key(username: str, address: str) -> str:
    """The failure counter of one account tried from one address. Counting per (account,
    address) and per address, never per account alone, follows Auth0's brute-force protection:
    a guesser is slowed, while an outsider cannot lock the real user out from other addresses
    (argon2id keeps every guess expensive, and the address limit caps a spread-out attack)."""
    return f"login:at:{digest(username.lower())[:32]}:{address_in_key(address)}"


def address_key(address: str) -> str:
    """The failure counter of every sign-in step tried from one address."""
    return f"login:ip:{address_in_key(address)}"


def login_limits(settings: Settings) -> tuple[lockout.Limit, lockout.Limit]:
    account = lockout.Limit(settings.login_max_failures, 900, settings.login_lockout_seconds)
    address = lockout.Limit(
        settings.login_max_failures * IP_FAILURES_PER_ACCOUNT_LIMIT,
        900,
        settings.login_lockout_seconds,
    )
    return account, address


Keys = tuple[str | None, str]  # (the account's failure key, if known; the address's)


def locked_for(db: Database, now: int, keys: Keys) -> int:
    """Seconds until neither the account key nor the address key of a sign-in is locked."""
    with db.read() as session:
        return max(lockout.retry_after(session, key, now) for key in keys if key is not None)


def record_failure(ctx: BrowserServices, keys: Keys) -> None:
    """Count a failed sign-in step (a password, a second factor, a passkey) against the
    account key (when the account is known) and the address key, each with its limit."""
    account, address = login_limits(ctx.settings)
    now = ctx.now()
    with ctx.db.write() as session:
        if keys[0] is not None:
            lockout.record_failure(session, keys[0], now, account)
        lockout.record_failure(session, keys[1], now, address)


def _password_hash(db: Database, username: str) -> tuple[str | None, str | None]:
    with db.read() as session:
        user = user_by_name(session, username)
    return (user.id, user.password_hash) if user else (None, None)


def _succeed(db: Database, account_key: str) -> None:
    with db.write() as session:
        lockout.clear(session, account_key)


async def attempt_login(
    ctx: BrowserServices,
    request: Request,
    browser: BrowserSession,
    purpose: str,
    *,
    retry_url: str,
) -> LoginOutcome | Response:
    """Check a posted login form: the account whose password it was, or the form's error;
    the caller goes on to the second factor or signs the session in. A locked account or
    address gets a page with the wait and a link to ``retry_url``."""
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    if not ctx.settings.local_accounts:
        return error_page(
            "invalid_request",
            "This service doesn't sign in with a username and password. Use one of the "
            "sign-in buttons instead.",
            403,
            title="Password sign-in is off",
            back_url=retry_url,
            back_label="Back to sign-in",
        )
    form = await request.form(max_files=0, max_fields=10, max_part_size=4096)
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not csrf.csrf_valid(ctx.cookie_secret, browser.sid, purpose, fields.get("csrf_token")):
        return expired_sign_in(retry_url)
    username = fields.get("username", "").strip()
    password = fields.get("password", "")
    if not username or not password:
        return LoginOutcome(error="Enter your username and password.", username=username)
    if len(username) > MAX_USERNAME_LENGTH:
        error = f"The username is longer than {MAX_USERNAME_LENGTH} characters."
        return LoginOutcome(error=error, username=username[:MAX_USERNAME_LENGTH])
    if len(password) > MAX_PASSWORD_LENGTH:
        error = f"The password is longer than {MAX_PASSWORD_LENGTH} characters."
        return LoginOutcome(error=error, username=username)
    address = client_ip(request)
    keys = (account_key(username, address), address_key(address))
    locked = await run_blocking(locked_for, ctx.db, ctx.now(), keys)
    if locked:
        audit("login.locked", username=username, address=client_ip(request), retry_after=locked)
        return locked_page(locked, retry_url, ctx.now())
    user_id, password_hash = await run_blocking(_password_hash, ctx.db, username)
    if not await ctx.passwords.verify(password, password_hash) or user_id is None:
        await run_blocking(record_failure, ctx, keys)
        audit("login.failure", username=username, address=client_ip(request))
        # the form again, with the error: 200, as a 401 needs a WWW-Authenticate challenge
        # (RFC 9110 §15.5.2) and browsers log any 4xx page as a console error
        return LoginOutcome(error="Wrong username or password.", username=username)
    await run_blocking(_succeed, ctx.db, keys[0])
    return LoginOutcome(user_id=user_id, username=username)
