"""Sign-in through an upstream provider, in the browser (docs/security.md T34-T36, T38).

A provider's button on the sign-in page (or the account page) is a form POST, checked like
every form (Origin, a CSRF token bound to the session and the page); it stores a pending
sign-in under the digest of a fresh ``state`` (bound to the provider, the pending authorization
and this browser's session, single use, expiring with the authorization) and sends the browser
to the provider with PKCE (and a nonce, to an OpenID provider). The provider sends it back to
``/upstream/<provider>/callback``; the callback takes the pending sign-in (once), refuses a
response meant for another provider, another browser or another issuer (RFC 9207 ``iss``),
redeems the code, validates the ID token (or reads a plain OAuth 2.0 provider's user API),
applies the provider's policy, and only then finds or makes the account and signs the browser
in. The same round trip started from the account page's "Link" button links the identity to the
signed-in account instead (:mod:`mcpauth.server.browser.account_links`). Every refusal is a page
in plain words with a way back to the sign-in page; nothing is stored and no account is made
for it, and no refusal ever redirects anywhere but this server's own pages."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.browser import account_links, csrf, second_factor
from mcpauth.server.browser.login import expired_form, refuse_cross_site, upstream_purpose
from mcpauth.server.browser.outcomes import AuthorizationRequest, see_other
from mcpauth.server.browser.pages import error_page
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import (
    BrowserSession,
    load_session,
    save_session,
)
from mcpauth.server.browser.upstream_pages import (
    ACCOUNT,
    LINK,
    Refusal,
    back_to,
    callback_url,
    refusal_page,
    unavailable,
    unknown_provider,
)
from mcpauth.server.crypto import digest, matches, new_token
from mcpauth.server.identity.accounts import Refused, admit
from mcpauth.server.identity.id_tokens import IDTokenError
from mcpauth.server.identity.upstream import (
    ProfileError,
    Provider,
    ProviderMetadata,
    UpstreamRefused,
    UpstreamUnavailable,
)
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store, identities, upstream_tokens
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.models import Interaction, UpstreamLogin
from mcpauth.server.storage.upstream_tokens import UpstreamTokens
from mcpauth.server.threads import run_blocking

MAX_LOGIN_SECONDS = 600  # a pending upstream sign-in lives at most this long
MAX_STATE_LENGTH = 200
_RESPONSE_PARAMETERS = ("state", "code", "iss", "error")
_STATE = re.compile(r"^(account|link|[0-9a-f]{32})\.[A-Za-z0-9_-]{43}$")


# --------------------------------------------------------------------------------------------
# the button


def _pending_interaction(
    db: Database, now: int, interaction_id: str, sid: str
) -> tuple[Interaction, AuthorizationRequest] | None:
    with db.read() as session:
        interaction = grant_store.live_interaction(session, interaction_id, now)
    if interaction is None:
        return None
    request = AuthorizationRequest.from_dict(interaction.request)
    return (interaction, request) if request.sid == sid else None


def _store_login(db: Database, login: UpstreamLogin) -> None:
    with db.write() as session:
        identities.add_login(session, login)


async def _start(
    ctx: BrowserServices,
    request: Request,
    browser: BrowserSession,
    provider_id: str,
    target: str,
) -> Response:
    provider = ctx.upstream.get(provider_id)
    if provider is None:
        return unknown_provider()
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=5, max_part_size=1024)
    token = form.get("csrf_token")
    if not csrf.csrf_valid(ctx.cookie_secret, browser.sid, upstream_purpose(target), token):
        return expired_form(
            "The sign-in page had expired, so nothing was done.",
            back_to(ctx.settings, target),
            "Back to sign-in",
        )
    now = ctx.now()
    expires_at = now + MAX_LOGIN_SECONDS
    prompt = None
    if target == LINK:
        refusal = account_links.may_link(browser, now)
        if refusal is not None:
            return refusal_page(ctx.settings, refusal, target)
        prompt = "login"  # the person proves the identity now, not an old session there
    elif target != ACCOUNT:
        pending = await run_blocking(_pending_interaction, ctx.db, ctx.now(), target, browser.sid)
        if pending is None:
            return error_page(
                "invalid_request",
                "This sign-in request has expired, was already used or belongs to another "
                "browser. Go back to the application and start again.",
                400,
                title="This page has expired",
            )
        interaction, authorization = pending
        expires_at = min(expires_at, interaction.expires_at)
        prompt = "login" if authorization.prompt == "login" else None
    try:
        metadata = await ctx.upstream.metadata(provider)
    except UpstreamUnavailable as exc:
        audit("upstream.unavailable", provider=provider.id, reason=exc.reason)
        return refusal_page(ctx.settings, unavailable(provider, exc.reason), target)
    state = f"{target}.{new_token()}"
    login = UpstreamLogin(
        digest=digest(state),
        provider_id=provider.id,
        interaction_id=None if target in (ACCOUNT, LINK) else target,
        session_digest=digest(browser.sid),
        created_at=now,
        expires_at=expires_at,
    )
    await run_blocking(_store_login, ctx.db, login)
    audit("upstream.started", provider=provider.id)
    url = ctx.upstream.authorization_url(
        provider,
        metadata,
        redirect_uri=callback_url(ctx.settings, provider),
        state=state,
        prompt=prompt,
    )
    response = see_other(url)
    save_session(ctx, browser, response)
    return response


async def start_for_interaction(request: Request) -> Response:
    """POST /interaction/{interaction_id}/upstream/{provider_id}/login"""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    interaction_id = request.path_params["interaction_id"]
    if not re.fullmatch(r"[0-9a-f]{32}", interaction_id):
        return error_page("not_found", "There is no sign-in request at this address.", 404)
    return await _start(ctx, request, browser, request.path_params["provider_id"], interaction_id)


async def start_for_account(request: Request) -> Response:
    """POST /account/upstream/{provider_id}/login"""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    return await _start(ctx, request, browser, request.path_params["provider_id"], ACCOUNT)


async def start_for_link(request: Request) -> Response:
    """POST /account/upstream/{provider_id}/link: link the provider to the signed-in account"""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    return await _start(ctx, request, browser, request.path_params["provider_id"], LINK)


# --------------------------------------------------------------------------------------------
# the callback


def _take_login(db: Database, now: int, state: str) -> UpstreamLogin | None:
    with db.write() as session:
        return identities.take_login(session, digest(state), now)


def _check_response(
    provider: Provider,
    login: UpstreamLogin,
    browser: BrowserSession,
    metadata: ProviderMetadata,
    params: dict[str, str],
) -> Refusal | None:
    """Whether this response may be redeemed here: the provider the sign-in was started with
    (mix-up), this browser, the provider's ``iss`` (RFC 9207 §2.4), and no error."""
    if login.provider_id != provider.id:
        return Refusal(
            "mix_up",
            400,
            "This sign-in was refused",
            "The answer came back for another sign-in option than the one you chose, so it "
            "was refused.",
            error="invalid_request",
        )
    if not matches(browser.sid, login.session_digest):
        return Refusal(
            "other_browser",
            403,
            "This sign-in was refused",
            "This sign-in was started in another browser or another window that has since "
            "signed in or out.",
            error="invalid_request",
        )
    iss = params.get("iss")
    if (iss is not None and iss != metadata.issuer) or (
        iss is None and metadata.iss_parameter_supported
    ):
        return Refusal(
            "iss_mismatch",
            400,
            "This sign-in was refused",
            f"The answer did not come from {provider.name}, so it was refused.",
            error="invalid_request",
        )
    error = params.get("error")
    if error == "access_denied":
        return Refusal(
            "cancelled",
            400,
            "Sign-in was cancelled",
            f"Signing in with {provider.name} was cancelled, so you were not signed in.",
        )
    if error is not None:
        return Refusal(
            "upstream_error",
            400,
            f"{provider.name} could not sign you in",
            f"{provider.name} could not sign you in, so you were not signed in. "
            "Try again, or sign in another way.",
        )
    if not params.get("code"):
        return Refusal(
            "no_code",
            400,
            "This sign-in was refused",
            f"The answer from {provider.name} was incomplete, so you were not signed in.",
            error="invalid_request",
        )
    return None


def _finish(
    ctx: BrowserServices,
    browser: BrowserSession,
    login: UpstreamLogin,
    claims: identities.Claims,
    token: dict[str, Any],
) -> tuple[identities.SignedIn | None, Refusal | None]:
    """Find or make the account (the caller then signs the browser in, or asks for the
    account's second factor); nothing is written when the authorization has gone meanwhile."""
    if login.interaction_id is not None:
        pending = _pending_interaction(ctx.db, ctx.now(), login.interaction_id, browser.sid)
        if pending is None:
            return None, Refusal(
                "interaction_gone",
                400,
                "This page has expired",
                "This sign-in request has expired or was already used.",
                error="invalid_request",
            )
    try:
        with ctx.db.write() as session:
            signed_in = identities.sign_in(session, claims, login.provider_id, ctx.now())
            provider = ctx.upstream.get(login.provider_id)
            tokens = UpstreamTokens.from_response(token, ctx.now())
            if provider is not None and provider.config.keep_tokens and tokens is not None:
                # for token exchange (docs/security.md T37): sealed, this person's only
                upstream_tokens.keep(
                    session,
                    ctx.upstream_token_key,
                    signed_in.user_id,
                    login.provider_id,
                    tokens,
                    ctx.now(),
                )
    except identities.AccountConflict:
        return None, Refusal(
            "account_conflict",
            409,
            "This account can't be used here",
            "A local account already has this identity's name, so nothing was linked. "
            "Ask your administrator.",
        )
    return signed_in, None


def _target_of(state: str) -> str | None:
    """The sign-in page a state was made for (what the way back points to), if it is one of
    ours in shape; it is looked up like any other address, so nothing is trusted from it."""
    return state.split(".", 1)[0] if _STATE.match(state) else None


async def callback(request: Request) -> Response:
    """GET /upstream/{provider_id}/callback"""
    ctx = browser_services(request)
    provider = ctx.upstream.get(request.path_params["provider_id"])
    if provider is None:
        return unknown_provider()
    params = {k: v for k, v in request.query_params.items() if len(v) <= 4096}
    if any(len(request.query_params.getlist(name)) > 1 for name in _RESPONSE_PARAMETERS):
        params.pop("state", None)  # a parameter given twice (RFC 6749 §3.1): not ours
    state = params.get("state", "")
    target = _target_of(state) if len(state) <= MAX_STATE_LENGTH else None
    browser = await load_session(ctx, request)
    outcome = await _callback(ctx, request, provider, browser, params, state, target)
    if isinstance(outcome, Refusal):
        audit("upstream.refused", provider=provider.id, reason=outcome.reason)
        return refusal_page(ctx.settings, outcome, target)
    save_session(ctx, browser, outcome)
    return outcome


async def _callback(
    ctx: BrowserServices,
    request: Request,
    provider: Provider,
    browser: BrowserSession,
    params: dict[str, str],
    state: str,
    target: str | None,
) -> Response | Refusal:
    if target is None:
        return Refusal(
            "bad_state",
            400,
            "This sign-in was refused",
            "This sign-in answer is not one this service asked for.",
            error="invalid_request",
        )
    login = await run_blocking(_take_login, ctx.db, ctx.now(), state)
    if login is None:
        return Refusal(
            "state_unknown",
            400,
            "This page has expired",
            "This sign-in has expired or was already used, so you were not signed in.",
            error="invalid_request",
        )
    try:
        metadata = await ctx.upstream.metadata(provider)
    except UpstreamUnavailable as exc:
        return unavailable(provider, exc.reason)
    refusal = _check_response(provider, login, browser, metadata, params)
    if refusal is not None:
        return refusal
    try:
        claims, token = await ctx.upstream.redeem(
            provider,
            metadata,
            code=params["code"],
            state=state,
            redirect_uri=callback_url(ctx.settings, provider),
            now=ctx.now(),
        )
        kept = admit(provider.config, claims)
    except UpstreamUnavailable as exc:
        return unavailable(provider, exc.reason)
    except UpstreamRefused as exc:
        return Refusal(
            f"token_{exc.error}"[:40],
            400,
            f"{provider.name} did not accept the sign-in",
            f"{provider.name} did not accept this sign-in, so you were not signed in. Try again.",
        )
    except (IDTokenError, ProfileError) as exc:
        kind = "id_token" if isinstance(exc, IDTokenError) else "profile"
        return Refusal(
            f"{kind}_{exc.reason}"[:60],
            400,
            "This sign-in was refused",
            f"The answer from {provider.name} could not be verified, so you were not signed in.",
        )
    except Refused as exc:
        return Refusal(exc.reason, 403, "You can't sign in with this account", exc.message)
    if target == LINK:  # the state (found by its digest) says so: nobody could change it
        refused = await run_blocking(account_links.finish_link, ctx, browser, login, kept, token)
        return refused or see_other(
            ctx.endpoint_url(ACCOUNT) + "?" + urlencode({"linked": provider.id})
        )
    signed_in, refusal = await run_blocking(_finish, ctx, browser, login, kept, token)
    if refusal is not None:
        return refusal
    assert signed_in is not None
    audit(
        "upstream.login.success",
        provider=provider.id,
        user_id=signed_in.user_id,
        provisioned=signed_in.created,
    )
    # an account with a second factor of its own is asked for it, as after a password
    return await second_factor.after_first_factor(
        ctx, request, browser, signed_in.user_id, "", login.interaction_id, upstream=True
    )


def _page_of(login: UpstreamLogin) -> str:
    return ACCOUNT if login.interaction_id is None else f"interaction/{login.interaction_id}"
