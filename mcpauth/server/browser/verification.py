"""The verification page of the device authorization grant (RFC 8628 §3.3): a person types
the user code their device shows (a CSRF-protected form; a ``user_code`` in the link only fills
it in, RFC 8628 §3.3.1), and the request it names becomes a pending interaction: the usual
sign-in and a consent page that names the client, the resource and the scopes. The decision
ends it here (:func:`decided`), not in a redirect: the device learns it by polling.

Wrong codes are throttled per address and, to bound guessing from many addresses, for all
addresses together (RFC 8628 §5.1; docs/security.md T45). A wrong code names no device code,
so there is nothing to lock per device code: a guess that finds a live code is the only
success, and the two counters bound how many guesses there can be."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.oauth import format_scope, parse_scope
from mcpauth.server.browser import csrf
from mcpauth.server.browser.display import ClientView
from mcpauth.server.browser.login import expired_form, refuse_cross_site
from mcpauth.server.browser.outcomes import AuthorizationRequest, see_other
from mcpauth.server.browser.pages import error_page, render
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import BrowserSession, load_session, save_session
from mcpauth.server.browser.user_codes import (
    ALPHABET,
    LENGTH,
    MAX_TYPED_LENGTH,
    display,
    normalise,
    user_code_digest,
)
from mcpauth.server.crypto import new_id
from mcpauth.server.http_io import client_ip
from mcpauth.server.operations import lockout
from mcpauth.server.operations.logs import audit
from mcpauth.server.operations.size_limits import address_in_key
from mcpauth.server.storage import device_authorizations as devices
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.models import Grant, Interaction
from mcpauth.server.threads import run_blocking

PURPOSE = "device"
WINDOW = 900  # seconds over which wrong codes are counted
FIRST_WAIT = 60  # seconds of the first wait; it doubles with each further wrong code
EVERYONE = "device-code:all"
EXAMPLE = display(ALPHABET[:LENGTH])


def _address_key(address: str) -> str:
    return f"device-code:ip:{address_in_key(address)}"


def _limits(ctx: BrowserServices) -> tuple[lockout.Limit, lockout.Limit]:
    settings = ctx.settings
    return (
        lockout.Limit(settings.device_user_code_failures, WINDOW, FIRST_WAIT),
        lockout.Limit(settings.device_user_code_failures_total, WINDOW, FIRST_WAIT),
    )


def _wait_words(seconds: int) -> str:
    return f"{seconds} seconds" if seconds < 120 else f"about {-(-seconds // 60)} minutes"


def _page(
    ctx: BrowserServices,
    browser: BrowserSession,
    *,
    code: str = "",
    error: str | None = None,
    status: int = 200,
) -> Response:
    return render(
        "device.html",
        status,
        action=ctx.endpoint_url(PURPOSE),
        csrf_token=csrf.csrf_token(ctx.cookie_secret, browser.sid, PURPOSE),
        user_code=code,
        error=error,
        example=EXAMPLE,
        max_length=MAX_TYPED_LENGTH,
    )


async def show(request: Request) -> Response:
    """GET /device: the form, filled in with a well-formed ``user_code`` from the link (never
    checked here: only a posted form is)."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    typed = normalise(request.query_params.get("user_code", ""))
    response = _page(ctx, browser, code=display(typed) if typed else "")
    save_session(ctx, browser, response)
    return response


def _throttled(ctx: BrowserServices, address: str) -> Response | None:
    """The page that asks to wait while the address, or everyone, typed too many wrong codes."""
    now = ctx.now()
    with ctx.db.read() as session:
        own = lockout.retry_after(session, _address_key(address), now)
        everyone = lockout.retry_after(session, EVERYONE, now)
    if not own and not everyone:
        return None
    wait = max(own, everyone)
    who = "from your network" if own else "on this service by many people"
    page = error_page(
        "too_many_requests",
        f"Too many wrong codes were typed {who}, so codes are not checked for "
        f"{_wait_words(wait)}. Wait, then type the code your device shows.",
        429,
        title="Too many wrong codes",
        back_url=ctx.endpoint_url(PURPOSE),
        back_label="Try again",
    )
    page.headers["Retry-After"] = str(wait)
    return page


def _wrong(ctx: BrowserServices, address: str) -> None:
    own, everyone = _limits(ctx)
    now = ctx.now()
    with ctx.db.write() as session:
        lockout.record_failure(session, _address_key(address), now, own)
        lockout.record_failure(session, EVERYONE, now, everyone)
    audit("device.user_code_wrong", address=address)


def _enter(ctx: BrowserServices, browser: BrowserSession, typed: str, address: str) -> Response:
    """Check a typed code (the throttles first) and start the interaction it names."""
    throttled = _throttled(ctx, address)
    if throttled is not None:
        return throttled
    code = normalise(typed)
    if code is None:  # not a guess at any code: nothing to count
        return _page(
            ctx,
            browser,
            code=typed[:MAX_TYPED_LENGTH],
            error=f"A code has {LENGTH} letters, like {EXAMPLE}. Type the one your device shows.",
            status=400,
        )
    now = ctx.now()
    with ctx.db.read() as session:  # a read: no write lock for a guess
        row = devices.by_user_code(session, user_code_digest(ctx.cookie_secret, code))
    if row is None:
        _wrong(ctx, address)
        return _page(
            ctx,
            browser,
            code=display(code),
            error="That code is not right. Check the code your device shows and type it again.",
            status=400,
        )
    if row.expires_at <= now or row.status != devices.PENDING:
        return _page(
            ctx,
            browser,
            error="That code has expired or was already used. Start again on your device "
            "to get a new code.",
            status=400,
        )
    request = AuthorizationRequest(
        client_id=row.client_id,
        redirect_uri="",
        state=None,
        code_challenge="",
        resource=row.resource,
        scopes=parse_scope(row.scope),
        offline=row.offline,
        prompt=None,
        sid=browser.sid,
        device=row.digest,
    )
    interaction = Interaction(
        id=new_id(),
        request=request.to_dict(),
        created_at=now,
        expires_at=min(now + ctx.settings.interaction_ttl, row.expires_at),
    )
    with ctx.db.write() as session:
        grant_store.add_interaction(session, interaction)
    return see_other(ctx.endpoint_url(f"interaction/{interaction.id}"))


async def enter(request: Request) -> Response:
    """POST /device: the code the person typed."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    refused = refuse_cross_site(ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=10, max_part_size=1024)
    if not csrf.csrf_valid(ctx.cookie_secret, browser.sid, PURPOSE, form.get("csrf_token")):
        return expired_form(
            "The code form had expired or was sent twice, so nothing was done.",
            ctx.endpoint_url(PURPOSE),
            "Type the code again",
        )
    typed = form.get("user_code")
    typed = typed if isinstance(typed, str) else ""
    response = await run_blocking(_enter, ctx, browser, typed, client_ip(request))
    save_session(ctx, browser, response)
    return response


def decided(
    ctx: BrowserServices,
    browser: BrowserSession,
    interaction_id: str,
    request: AuthorizationRequest,
    client: ClientView,
    approved: bool,
) -> Response:
    """The person's decision on a device's request (the consent page's POST): recorded once,
    the interaction consumed, and a page that sends them back to the device."""
    user_id = browser.user_id or ""
    device = request.device or ""
    now = ctx.now()
    grant = Grant(
        id=new_id(),
        user_id=user_id,
        client_id=request.client_id,
        resource=request.resource,
        scope=format_scope(request.scopes),
        created_at=now,
        last_used_at=now,
        amr=browser.amr,  # how the person signed in: the device's tokens carry it
    )
    with ctx.db.write() as session:
        done = devices.decide(
            session,
            device,
            now,
            user_id=user_id,
            auth_time=browser.auth_time or now,
            grant=grant if approved else None,
            interaction_id=interaction_id,
        )
    if not done:
        return error_page(
            "expired",
            "This device's request has expired or was already decided. Start again on your "
            "device to get a new code.",
            title="This request has ended",
        )
    return render("device_done.html", approved=approved, client=client)
