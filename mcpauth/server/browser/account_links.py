"""Linking an upstream identity to an account, and unlinking it: only by the account's own
explicit action on the account page, never because an email address matches (docs/security.md
T41).

A signed-in person presses "Link <provider>" (a form POST with a CSRF token, same-origin only);
the browser goes through the provider exactly as for a sign-in (the state bound to this browser
session, PKCE, nonce, the provider's policy), and the callback links the identity to the account
this session is signed in to. Linking needs a sign-in in the last :data:`LINK_MAX_AGE` seconds,
checked when the link starts and again when the provider's answer comes back, so a session left
open, or stolen, cannot add a way in. An identity that already signs in to another account is
never moved; an account has at most one identity per provider. "Remove" unlinks a provider
(and deletes the tokens kept from it), also only after a recent sign-in, unless it is the
account's last way to sign in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.browser import csrf
from mcpauth.server.browser.login import expired_form, refuse_cross_site, upstream_purpose
from mcpauth.server.browser.outcomes import see_other
from mcpauth.server.browser.pages import error_page
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import BrowserSession, load_session
from mcpauth.server.browser.upstream_pages import ACCOUNT, LINK, Refusal
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import identities, upstream_tokens
from mcpauth.server.storage.database import Session
from mcpauth.server.storage.models import UpstreamLogin, User
from mcpauth.server.storage.upstream_tokens import UpstreamTokens
from mcpauth.server.threads import run_blocking

LINK_MAX_AGE = 900  # seconds since the session signed in, for linking a provider
UNLINK_PURPOSE = "unlink"


def may_link(browser: BrowserSession, now: int) -> Refusal | None:
    """Why this browser may not link a provider now, if it may not."""
    if browser.user_id is None:
        return Refusal(
            "link_signed_out",
            403,
            "Sign in first",
            "Sign in to your account before linking another way to sign in, so nothing was linked.",
        )
    if browser.auth_time is None or now - browser.auth_time > LINK_MAX_AGE:
        return Refusal(
            "link_stale_sign_in",
            403,
            "Sign in again to link",
            f"Linking another way to sign in needs a sign-in in the last {LINK_MAX_AGE // 60} "
            "minutes, so nothing was linked. Sign out, sign in again, and link it then.",
        )
    return None


def finish_link(
    ctx: BrowserServices,
    browser: BrowserSession,
    login: UpstreamLogin,
    claims: identities.Claims,
    token: dict[str, Any],
) -> Refusal | None:
    """Link the identity of a verified, admitted answer to the account this browser is signed
    in to (still recently: checked again); None when linked."""
    now = ctx.now()
    refusal = may_link(browser, now)
    if refusal is not None:
        return refusal
    assert browser.user_id is not None
    provider = ctx.upstream.get(login.provider_id)
    name = provider.name if provider is not None else login.provider_id
    try:
        with ctx.db.write() as session:
            created = identities.link(session, claims, login.provider_id, browser.user_id, now)
            tokens = UpstreamTokens.from_response(token, now)
            if provider is not None and provider.config.keep_tokens and tokens is not None:
                upstream_tokens.keep(
                    session,
                    ctx.upstream_token_key,
                    browser.user_id,
                    login.provider_id,
                    tokens,
                    now,
                )
    except identities.IdentityTaken:
        return Refusal(
            "link_identity_taken",
            409,
            "This account is already in use",
            f"This {name} account already signs in to another account here, so it was not "
            f"linked. Sign in with {name} to use that account, or ask your administrator.",
        )
    except identities.ProviderTaken:
        return Refusal(
            "link_provider_taken",
            409,
            f"Another {name} account is linked",
            f"Your account is already linked to another {name} account, so this one was not "
            "linked. Remove the other one first.",
        )
    audit(
        "account.identity_linked", provider=login.provider_id, user_id=browser.user_id, new=created
    )
    return None


# --------------------------------------------------------------------------------------------
# the account page's section


@dataclass(frozen=True)
class LinkedView:
    provider_id: str
    name: str  # the provider's
    who: str | None  # the email or name of the identity there


@dataclass(frozen=True)
class LinkButton:
    name: str
    action: str


@dataclass(frozen=True)
class SignInMethods:
    """What the account page shows under "Ways to sign in"."""

    password: bool
    linked: list[LinkedView]
    can_link: list[LinkButton]  # empty when the sign-in is not recent enough
    link_token: str
    unlink_action: str
    unlink_token: str
    relink_note: bool  # providers could be linked or removed after a fresh sign-in
    can_remove: bool  # the sign-in is recent enough to remove one

    @property
    def shown(self) -> bool:
        return bool(self.linked or self.can_link or self.relink_note)


def sign_in_methods(
    ctx: BrowserServices, session: Session, browser: BrowserSession, user: User
) -> SignInMethods:
    linked = identities.linked_identities(session, user.id)
    names = {provider.id: provider.name for provider in ctx.upstream}
    mine = {identity.provider_id for identity in linked}
    recent = may_link(browser, ctx.now()) is None
    unlinked = [provider for provider in ctx.upstream if provider.id not in mine]
    return SignInMethods(
        # a password kept from before `local_accounts = false` opens nothing any more
        password=ctx.settings.local_accounts and identities.has_password(user.password_hash),
        linked=[
            LinkedView(
                i.provider_id, names.get(i.provider_id, i.provider_id), i.email or i.name or ""
            )
            for i in linked
        ],
        can_link=[
            LinkButton(provider.name, ctx.endpoint_url(f"account/upstream/{provider.id}/link"))
            for provider in unlinked
            if recent
        ],
        link_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, upstream_purpose(LINK)),
        unlink_action=ctx.endpoint_url("account/unlink"),
        unlink_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, UNLINK_PURPOSE),
        relink_note=bool(unlinked or linked) and not recent,
        can_remove=recent,
    )


# --------------------------------------------------------------------------------------------
# removing one


def only_way_in(account: str, what: str) -> Response:
    """409 for removing an account's last way to sign in (``what``: "This", "This passkey")."""
    return error_page(
        "invalid_request",
        f"{what} is the only way you can sign in to your account, so it was not removed.",
        409,
        title="This is your only way to sign in",
        back_url=account,
        back_label="Back to your account",
    )


def _unlink(ctx: BrowserServices, user_id: str, provider_id: str) -> int:
    configured = {provider.id for provider in ctx.upstream}
    with ctx.db.write() as session:
        removed = identities.unlink(
            session,
            user_id,
            provider_id,
            configured,
            passwords_sign_in=ctx.settings.local_accounts,
        )
        if removed:
            upstream_tokens.forget(session, user_id, provider_id)
    return removed


async def unlink(request: Request) -> Response:
    """POST /account/unlink (provider_id in the form)"""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    account = ctx.endpoint_url(ACCOUNT)
    if browser.user_id is None:
        return see_other(account)
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=5, max_part_size=1024)
    token, provider_id = form.get("csrf_token"), form.get("provider_id")
    genuine = csrf.csrf_valid(ctx.cookie_secret, browser.sid, UNLINK_PURPOSE, token)
    if not genuine or not isinstance(provider_id, str):
        return expired_form(
            "The account page had expired, so nothing was removed.",
            account,
            "Back to your account",
        )
    stale = may_link(browser, ctx.now())  # removing a way in needs a recent sign-in too
    if stale is not None:
        return error_page(
            "access_denied",
            "Removing a way to sign in needs a sign-in in the last "
            f"{LINK_MAX_AGE // 60} minutes, so nothing was removed. Sign out, sign in again, "
            "and remove it then.",
            403,
            title="Sign in again to remove",
            back_url=account,
            back_label="Back to your account",
        )
    try:
        removed = await run_blocking(_unlink, ctx, browser.user_id, provider_id[:64])
    except identities.LastWayIn:
        return only_way_in(account, "This")
    if not removed:
        return see_other(account)
    audit("account.identity_unlinked", provider=provider_id[:64], user_id=browser.user_id)
    return see_other(account + "?" + urlencode({"unlinked": provider_id[:64]}))
