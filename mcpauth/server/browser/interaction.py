"""Login and consent for a pending authorization request. Every page carries the interaction
headers; every POST checks the Origin, a CSRF token bound to the session and to this request,
and that the browser is the one that started it; every redirect after a POST is a 303."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.errors import AccessDenied, OAuthError
from mcpauth.oauth import format_scope, parse_scope
from mcpauth.server.browser import csrf, verification
from mcpauth.server.browser.display import ClientView, client_view, redirect_view, scope_words
from mcpauth.server.browser.login import expired_form, expired_sign_in, refuse_cross_site
from mcpauth.server.browser.outcomes import (
    AuthorizationRequest,
    code_redirect,
    error_redirect,
    issue_code,
)
from mcpauth.server.browser.pages import error_page, render
from mcpauth.server.browser.second_factor import after_first_factor, step_up
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import BrowserSession, load_session, save_session
from mcpauth.server.browser.sign_in_step import (
    Account,
    PasswordAndProviders,
    PendingSignIn,
    SignInStep,
)
from mcpauth.server.clients.redirect_uris import all_loopback
from mcpauth.server.identity import methods
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage import grant_store, identities
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.lookups import find_or_add_user, get_client, get_resource, get_user
from mcpauth.server.storage.models import Client, Interaction
from mcpauth.server.threads import run_blocking

BUILT_IN = PasswordAndProviders()


class LoginRequired(OAuthError):
    error = "login_required"


class ConsentRequired(OAuthError):
    error = "consent_required"


class InteractionRequired(OAuthError):
    error = "interaction_required"  # OpenID Connect Core §3.1.2.6


def _load(db: Database, now: int, interaction_id: str) -> tuple[Interaction, Client] | None:
    with db.read() as session:
        interaction = grant_store.live_interaction(session, interaction_id, now)
        if interaction is None:
            return None
        client = get_client(session, interaction.request["client_id"])
    return (interaction, client) if client is not None else None


def _expired() -> Response:
    return error_page(
        "invalid_request",
        "This sign-in request has expired or was already used. "
        "Go back to the application and start again.",
        title="This page has expired",
    )


def identity_unproven(client: Client, redirect_uri: str) -> bool:
    """A public client answered at a loopback or custom-scheme address: any program on the
    user's device could be it (RFC 8252 §8.6), so consent is not given silently for long."""
    return client.token_endpoint_auth_method == "none" and not redirect_uri.startswith("https://")


def _needs_consent(
    ctx: BrowserServices, req: AuthorizationRequest, client: Client, user_id: str
) -> bool:
    """Whether to show the consent page. A remembered consent holds only for what the page
    showed: the same client name and redirect host (the exact redirect URI, and only for a
    short while, when the client's identity cannot be proven) — RFC 6749 §10.2."""
    if client.first_party:
        return False
    if req.prompt == "consent":
        return True
    with ctx.db.read() as session:
        consent = grant_store.get_consent(session, user_id, client.client_id, req.resource)
    if consent is None or consent.client_name != client_view_of(client).name:
        return True
    wanted = set(req.scopes) | ({"offline_access"} if req.offline else set())
    if not wanted <= set(parse_scope(consent.scope)):
        return True
    if identity_unproven(client, req.redirect_uri):
        window = ctx.settings.unproven_client_consent_window
        return consent.redirect_uri != req.redirect_uri or ctx.now() - consent.updated_at > window
    return urlsplit(consent.redirect_uri).netloc != urlsplit(req.redirect_uri).netloc


def client_view_of(client: Client, redirect_uri: str | None = None) -> ClientView:
    """How a person is shown ``client``; a self-registered one by the host of ``redirect_uri``
    when one is being used (the consent page), not by the first it registered: a client that
    registered a loopback URI first must not be shown as "localhost" while the code goes to
    ``cursor://``."""
    uris = client.redirect_uris
    if redirect_uri is not None:
        uris = [redirect_uri, *(u for u in uris if u != redirect_uri)]
    return client_view(
        client.client_id, client.client_name, client.source, uris, client.client_metadata
    )


# what a resource's tokens tell it about the person (resources.token_claims), in words
_SHARED = {
    "email": "your verified email address",
    "email_verified": "whether it is verified",
    "name": "your name",
    "groups": "the groups you belong to",
}


def _in_words(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _consent_page(
    ctx: BrowserServices,
    browser: BrowserSession,
    interaction: Interaction,
    client: Client,
    req: AuthorizationRequest,
) -> Response:
    with ctx.db.read() as session:
        user = get_user(session, browser.user_id or "")
        resource = get_resource(session, req.resource)
        granted = grant_store.consented_scopes(
            session, browser.user_id or "", client.client_id, req.resource
        )
        shown_name = identities.display_name(session, user) if user else ""
    descriptions = resource.scopes if resource else {}
    claims = set(resource.token_claims) if resource else set()
    shared = [words for claim, words in _SHARED.items() if claim in claims]
    if "email_verified" in claims and "email" not in claims:
        shared[shared.index(_SHARED["email_verified"])] = "whether your email address is verified"
    device = req.device is not None  # no redirect: the person goes back to the device
    view = client_view_of(client, None if device else req.redirect_uri)
    redirect = None if device else redirect_view(req.redirect_uri, self_registered=view.unverified)
    new = [s for s in req.scopes if s not in granted]
    return render(
        "consent.html",
        img_origins=view.img_origins,
        client=view,
        username=shown_name,
        resource=req.resource,
        resource_name=(resource.name if resource and resource.name else req.resource),
        scopes=[
            {
                "name": s,
                "description": scope_words(s, descriptions),
                "new": bool(granted) and s in new,
            }
            for s in req.scopes
        ],
        step_up=bool(granted) and bool(new) and req.prompt != "consent",
        again=bool(granted) and not new,
        offline=req.offline,
        shared=_in_words(shared),
        device=device,
        redirect=redirect,  # always shown, but for a device
        loopback_only=not device and all_loopback(client.redirect_uris),
        action=ctx.endpoint_url(f"interaction/{interaction.id}/consent"),
        account_url=ctx.endpoint_url("account"),
        csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, f"consent:{interaction.id}"),
    )


class _SignInNeeded:
    """What :func:`_proceed` answers when the sign-in step must run (it is async)."""

    def __init__(self, interaction_id: str, client: Client) -> None:
        self.interaction_id = interaction_id
        self.client = client


def sign_in_step(request: Request) -> SignInStep:
    """The app's sign-in step (``create_app(..., sign_in=...)``), the built-in one if none."""
    step = getattr(request.app.state, "mcpauth_sign_in", None)
    return step if isinstance(step, SignInStep) else BUILT_IN


def _pending(
    ctx: BrowserServices, browser: BrowserSession, interaction_id: str, client: Client
) -> PendingSignIn:
    return PendingSignIn(
        interaction_id=interaction_id,
        client_name=client_view_of(client).name,
        form_action=ctx.endpoint_url(f"interaction/{interaction_id}/login"),
        csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, f"login:{interaction_id}"),
        context=ctx,
        browser=browser,
    )


def _account_id(ctx: BrowserServices, account: Account) -> str | None:
    """The user id of what a sign-in step returned: found, or created for a username."""
    if account.user_id is not None:
        with ctx.db.read() as session:
            return account.user_id if get_user(session, account.user_id) else None
    with ctx.db.write() as session:
        return find_or_add_user(session, account.username or "", ctx.now())


async def _signed_in(
    ctx: BrowserServices,
    request: Request,
    browser: BrowserSession,
    interaction_id: str,
    account: Account,
    amr: str,
) -> Response:
    """The account a step returned proved its first factor (``amr``: ``pwd`` for the built-in
    step's password, none for an application's own step): on to the second factor or signed
    in, and on with the request."""
    user_id = await run_blocking(_account_id, ctx, account)
    if user_id is None:
        return error_page(
            "server_error",
            "The sign-in named an account that does not exist.",
            500,
            title="Sign-in failed",
        )
    return await after_first_factor(ctx, request, browser, user_id, amr, interaction_id)


def _step_up_for(ctx: BrowserServices, req: AuthorizationRequest) -> str | None:
    """The name of what needs two factors before this request goes on (the resource, when it
    or the server requires them), or None."""
    with ctx.db.read() as session:
        resource = get_resource(session, req.resource)
    if not methods.required(ctx.settings, resource):
        return None
    return resource.name if resource is not None and resource.name else req.resource


def _needs_step_up(
    ctx: BrowserServices, browser: BrowserSession, req: AuthorizationRequest
) -> str | None:
    """What needs two factors that this signed-in session has not shown, or None."""
    if methods.has_two_factors(browser.amr):
        return None
    return _step_up_for(ctx, req)


def _proceed(
    ctx: BrowserServices, browser: BrowserSession, interaction_id: str
) -> Response | _SignInNeeded:
    """Show what the request needs next: login, consent, or the code."""
    loaded = _load(ctx.db, ctx.now(), interaction_id)
    if loaded is None:
        return _expired()
    interaction, client = loaded
    req = AuthorizationRequest.from_dict(interaction.request)
    if req.sid != browser.sid:
        return error_page(
            "invalid_request",
            "This sign-in request belongs to another browser "
            "session. Start again from the application.",
            403,
        )
    signed_in = browser.user_id is not None and (req.prompt != "login" or req.signed_in_here)
    user_id = browser.user_id or ""
    needed_by = _needs_step_up(ctx, browser, req) if signed_in else None
    if needed_by is not None:
        if req.prompt == "none":  # OpenID Connect Core §3.1.2.6: no page to ask on
            ask = InteractionRequired(f"{needed_by} requires a second factor at sign-in")
            return error_redirect(ctx.settings.issuer, client, req.redirect_uri, req.state, ask)
        return step_up(ctx, browser, interaction.id, needed_by)
    # RFC 8628 §5.4: a device's request is always confirmed (the person may be phished)
    if signed_in and req.device is None and not _needs_consent(ctx, req, client, user_id):
        code = issue_code(
            ctx, req, user_id, browser.auth_time or ctx.now(), interaction.id, amr=browser.amr
        )
        return code_redirect(ctx.settings.issuer, req, code)
    if req.prompt == "none":  # OpenID Connect Core §3.1.2.1: no page; the error goes back
        error: OAuthError = (
            ConsentRequired("The user has not approved this client")
            if signed_in
            else LoginRequired("The user is not signed in")
        )
        return error_redirect(ctx.settings.issuer, client, req.redirect_uri, req.state, error)
    if not signed_in:
        return _SignInNeeded(interaction.id, client)
    return _consent_page(ctx, browser, interaction, client, req)


async def show(request: Request) -> Response:
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    outcome = await run_blocking(_proceed, ctx, browser, request.path_params["interaction_id"])
    if isinstance(outcome, _SignInNeeded):
        pending = _pending(ctx, browser, outcome.interaction_id, outcome.client)
        step_of_app = sign_in_step(request)
        step = await step_of_app.page(request, pending)
        outcome = (
            await _signed_in(
                ctx, request, browser, outcome.interaction_id, step, _first_factor(step_of_app)
            )
            if isinstance(step, Account)
            else step
        )
    save_session(ctx, browser, outcome)
    return outcome


async def _forged(
    ctx: BrowserServices, request: Request, browser: BrowserSession, interaction_id: str
) -> Response | None:
    """The refusal of a sign-in post from another site or without this form's CSRF token,
    before an application's own step sees it; None when the post is genuine."""
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=50, max_part_size=4096)
    purpose = f"login:{interaction_id}"
    if not csrf.csrf_valid(ctx.cookie_secret, browser.sid, purpose, form.get("csrf_token")):
        return expired_sign_in(ctx.endpoint_url(f"interaction/{interaction_id}"))
    return None


async def login(request: Request) -> Response:
    ctx = browser_services(request)
    interaction_id = request.path_params["interaction_id"]
    browser = await load_session(ctx, request)
    loaded = await run_blocking(_load, ctx.db, ctx.now(), interaction_id)
    if loaded is None:
        return _expired()
    interaction, client = loaded
    if interaction.request["sid"] != browser.sid:
        return error_page(
            "invalid_request",
            "This sign-in request belongs to another browser "
            "session. Start again from the application.",
            403,
        )
    step_of_app = sign_in_step(request)
    # the built-in step checks these itself, in the order its pages explain
    if not isinstance(step_of_app, PasswordAndProviders):
        forged = await _forged(ctx, request, browser, interaction_id)
        if forged is not None:
            return forged
    pending = _pending(ctx, browser, interaction_id, client)
    step = await step_of_app.submit(request, pending)
    response = (
        await _signed_in(ctx, request, browser, interaction_id, step, _first_factor(step_of_app))
        if isinstance(step, Account)
        else step
    )
    save_session(ctx, browser, response)
    return response


def _first_factor(step: SignInStep) -> str:
    """The method an Account from ``step`` proved: the built-in step's is a password."""
    return methods.PASSWORD if isinstance(step, PasswordAndProviders) else ""


def _decide(
    ctx: BrowserServices, browser: BrowserSession, interaction_id: str, action: str
) -> Response:
    loaded = _load(ctx.db, ctx.now(), interaction_id)
    if loaded is None:
        return _expired()
    interaction, client = loaded
    req = AuthorizationRequest.from_dict(interaction.request)
    if req.sid != browser.sid or browser.user_id is None:
        return error_page("invalid_request", "This consent does not belong to this session.", 403)
    needed_by = _needs_step_up(ctx, browser, req)
    if needed_by is not None:  # the consent page is shown only after it; a post alone is not
        return step_up(ctx, browser, interaction_id, needed_by)
    audit(
        f"consent.{'granted' if action == 'approve' else 'denied'}",
        user_id=browser.user_id,
        client_id=client.client_id,
        resource=req.resource,
        scope=format_scope(req.scopes),
    )
    if req.device is not None:
        return verification.decided(
            ctx, browser, interaction_id, req, client_view_of(client), action == "approve"
        )
    if action == "deny":
        with ctx.db.write() as session:
            grant_store.drop_interaction(session, interaction_id)
        return error_redirect(
            ctx.settings.issuer,
            client,
            req.redirect_uri,
            req.state,
            AccessDenied("The user denied the request"),
            user_acted=True,
        )
    code = issue_code(
        ctx,
        req,
        browser.user_id,
        browser.auth_time or ctx.now(),
        interaction_id,
        approved_as=client_view_of(client).name,
        amr=browser.amr,
    )
    return code_redirect(ctx.settings.issuer, req, code)


async def consent(request: Request) -> Response:
    ctx = browser_services(request)
    interaction_id = request.path_params["interaction_id"]
    browser = await load_session(ctx, request)
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=10, max_part_size=4096)
    token = form.get("csrf_token")
    action = form.get("action")
    if not csrf.csrf_valid(ctx.cookie_secret, browser.sid, f"consent:{interaction_id}", token):
        return expired_form(
            "The consent form had expired or was sent twice, so nothing was done.",
            ctx.endpoint_url(f"interaction/{interaction_id}"),
            "Show the request again",
        )
    if action not in ("approve", "deny"):
        return error_page("invalid_request", "Choose approve or deny.", 400)
    return await run_blocking(_decide, ctx, browser, interaction_id, action)
