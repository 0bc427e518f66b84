"""The admin console (``/admin``): server-rendered pages, in the sign-in pages' look and
without scripts, for the people an operator made administrators (``mcpauth users add
--admin``, ``mcpauth users admin NAME --grant``). Every action is an operation of
:class:`~mcpauth.server.admin.Admin`, the one the command line runs, so it is checked and
audited the same way (the ``admin.*`` events name the acting administrator).

The rules:

- signed out: sent to the account page to sign in; signed in but not an administrator: a 403
  page in plain words (nothing of the console is shown);
- every form is a POST from this server's own pages (Fetch metadata, ``Origin``) carrying the
  synchroniser token of the session's ``admin`` form; a destructive step (remove, revoke,
  rotate, disable, reset, sign out, granting or dropping an administrator) also needs a
  sign-in within the account page's recent-sign-in window (:data:`RECENT`), else a 403 page
  asking to sign in again;
- no secret is ever shown: clients are inspected without one (the console registers none), a
  new user's generated password is shown once, on the page that answers the form, never
  stored or shown again.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.admin import Admin, AdminError, acting_admin
from mcpauth.server.browser import csrf
from mcpauth.server.browser.account_links import LINK_MAX_AGE
from mcpauth.server.browser.account_security import recent
from mcpauth.server.browser.login import refuse_cross_site
from mcpauth.server.browser.outcomes import see_other
from mcpauth.server.browser.pages import error_page, render
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.browser.sessions import BrowserSession, load_session
from mcpauth.server.threads import run_blocking

PURPOSE = "admin"  # the CSRF purpose of every console form
RECENT = LINK_MAX_AGE  # seconds since sign-in within which a destructive step is allowed
PAGES = (  # the console's pages, in the order of its navigation
    ("", "Overview"),
    ("clients", "Clients"),
    ("resources", "Resources"),
    ("users", "Users"),
    ("keys", "Signing keys"),
    ("upstream", "Providers"),
    ("audit", "Audit log"),
)
NOTICES = {
    "client-removed": "The client is removed; its grants and tokens are gone.",
    "client-disabled": "The client is disabled: every endpoint refuses it, its tokens too.",
    "client-enabled": "The client is enabled again.",
    "resource-added": "The resource is added.",
    "resource-changed": "The resource's scopes are changed.",
    "resource-removed": "The resource is removed.",
    "user-removed": "The user is removed, with her grants and sessions.",
    "user-disabled": "The user is disabled: signed out, her grants revoked, no sign-in.",
    "user-enabled": "The user is enabled again and may sign in.",
    "admin-granted": "The user is an administrator now.",
    "admin-dropped": "The user is no longer an administrator.",
    "mfa-reset": "The user's second factors are removed and her sessions ended.",
    "grants-revoked": "Revoked: the refresh tokens of those grants no longer work.",
    "sessions-ended": "Every browser session of the user has ended.",
    "keys-rotated": "A new signing key is published.",
}
MAX_FIELD = 4096  # characters of one form field


@dataclass
class Console:
    """A request of a signed-in administrator."""

    request: Request
    ctx: BrowserServices
    browser: BrowserSession
    admin: Admin
    name: str

    def url(self, page: str, **query: str) -> str:
        base = self.ctx.endpoint_url("admin" + (f"/{page}" if page else ""))
        return base + ("?" + urlencode(query) if query else "")

    def render(self, page: str, status: int = 200, **context: Any) -> Response:
        notice = self.request.query_params.get("done", "")
        shown = "users" if page == "person" else page  # the page the navigation marks
        return render(
            "admin.html",
            status,
            wide=True,
            page=page,
            nav=[(self.url(p), label, p == shown) for p, label in PAGES],
            admin_name=self.name,
            csrf_token=csrf.csrf_token(self.ctx.cookie_secret, self.browser.sid, PURPOSE),
            recent=recent(self.browser, self.ctx.now()),
            recent_minutes=RECENT // 60,
            account_url=self.ctx.endpoint_url("account"),
            action=lambda name: self.ctx.endpoint_url(f"admin/do/{name}"),
            notice=NOTICES.get(notice, ""),
            when=_when,
            **context,
        )

    async def call(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """An :class:`Admin` operation, off the event loop, audited as this administrator's."""
        acting_admin.set(self.name)
        return await run_blocking(lambda: operation(*args, **kwargs))


def _when(seconds: int | None) -> str:
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _forbidden(ctx: BrowserServices) -> Response:
    return error_page(
        "access_denied",
        "This page is for the server's administrators, and your account is not one. If you "
        "should be, ask an administrator to make you one.",
        403,
        title="Administrators only",
        back_url=ctx.endpoint_url("account"),
        back_label="Go to your account",
    )


async def _console(request: Request) -> Console | Response:
    """The console of the signed-in administrator, or the answer to anyone else: the sign-in
    (the account page) when signed out, the 403 page when not an administrator."""
    ctx = browser_services(request)
    browser = await load_session(ctx, request)
    if browser.user_id is None:
        return see_other(ctx.endpoint_url("account"))
    admin = Admin.of(request.app)
    name = await run_blocking(admin.administrator, browser.user_id)
    if name is None:
        return _forbidden(ctx)
    return Console(request, ctx, browser, admin, name)


def page(
    handler: Callable[[Console], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A console page: shown to administrators only."""

    async def endpoint(request: Request) -> Response:
        console = await _console(request)
        if isinstance(console, Response):
            return console
        return await handler(console)

    return endpoint


# --------------------------------------------------------------------------------------------
# the pages


@page
async def overview(c: Console) -> Response:
    users = await c.call(c.admin.list_users)
    clients = await c.call(c.admin.list_clients)
    resources = await c.call(c.admin.list_resources)
    keys = await c.call(c.admin.list_keys)
    counts = [
        ("Users", len(users), c.url("users")),
        ("Clients", len(clients), c.url("clients")),
        ("Resources", len(resources), c.url("resources")),
        ("Signing keys", len(keys), c.url("keys")),
    ]
    return c.render("", counts=counts)


@page
async def clients(c: Console) -> Response:
    client_id = c.request.query_params.get("client_id", "")[:MAX_FIELD]
    found = await c.call(c.admin.list_clients, client_id or None)
    if client_id and not found:
        return _not_found(c, "clients", "There is no client with this id.")
    return c.render("clients", clients=found, client=found[0] if client_id else None)


@page
async def resources(c: Console) -> Response:
    return c.render("resources", resources=await c.call(c.admin.list_resources))


@page
async def users(c: Console) -> Response:
    name = c.request.query_params.get("name", "")[:200]
    if not name:
        return c.render("users", users=await c.call(c.admin.list_users))
    listed = [u for u in await c.call(c.admin.list_users) if u["username"] == name]
    if not listed:
        return _not_found(c, "users", "There is no user with this name.")
    return c.render(
        "person",
        person=listed[0],
        grants=await c.call(c.admin.user_grants, name),
        sessions=await c.call(c.admin.user_sessions, name),
    )


@page
async def keys(c: Console) -> Response:
    return c.render("keys", keys=await c.call(c.admin.list_keys))


@page
async def upstream(c: Console) -> Response:
    return c.render("upstream", providers=await c.call(c.admin.list_upstream))


def _time(text: str) -> int | None:
    """Seconds since the epoch from a form's date and time (UTC), None when empty.

    Raises:
        AdminError: not a date and time.
    """
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise AdminError(f"not a date and time: {text[:40]!r}") from exc
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp())


@page
async def audit(c: Console) -> Response:
    query = {k: c.request.query_params.get(k, "")[:200].strip() for k in AUDIT_FILTERS}
    try:
        since, until = _time(query["since"]), _time(query["until"])
    except AdminError as exc:
        return c.render("audit", 400, query=query, events=[], error=str(exc), searched=True)
    events = await c.call(
        c.admin.search_audit,
        user=query["user"] or None,
        client=query["client"] or None,
        event=query["event"] or None,
        since=since,
        until=until,
        limit=200,
    )
    return c.render("audit", query=query, events=events, error="", searched=any(query.values()))


AUDIT_FILTERS = ("user", "client", "event", "since", "until")


def _not_found(c: Console, back: str, description: str) -> Response:
    return error_page(
        "invalid_request",
        description,
        404,
        title="Not found",
        back_url=c.url(back),
        back_label="Back",
    )


# --------------------------------------------------------------------------------------------
# the actions


@dataclass(frozen=True)
class Action:
    """One console form: whether it needs a recent sign-in, and what it does (its fields in,
    the page to go back to and the notice out, or a response of its own)."""

    destructive: bool
    run: Callable[[Console, dict[str, str]], Awaitable[tuple[str, str] | Response]]


def _scopes(text: str) -> list[str]:
    """Scopes typed one a line (``name`` or ``name=description``) or space-separated names."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and "=" not in lines[0]:
        return lines[0].split()
    return lines


async def _remove_client(c: Console, f: dict[str, str]) -> tuple[str, str]:
    await c.call(c.admin.remove_client, f.get("client_id", ""))
    return c.url("clients"), "client-removed"


async def _disable_client(c: Console, f: dict[str, str]) -> tuple[str, str]:
    client_id = f.get("client_id", "")
    disabled = f.get("disabled") == "1"
    await c.call(c.admin.disable_client, client_id, disabled)
    return c.url("clients", client_id=client_id), (
        "client-disabled" if disabled else "client-enabled"
    )


async def _add_resource(c: Console, f: dict[str, str]) -> tuple[str, str]:
    await c.call(
        c.admin.add_resource,
        f.get("uri", ""),
        name=f.get("name", "").strip(),
        scopes=_scopes(f.get("scopes", "")),
    )
    return c.url("resources"), "resource-added"


async def _edit_resource(c: Console, f: dict[str, str]) -> tuple[str, str]:
    await c.call(c.admin.edit_resource, f.get("uri", ""), scopes=_scopes(f.get("scopes", "")))
    return c.url("resources"), "resource-changed"


async def _remove_resource(c: Console, f: dict[str, str]) -> tuple[str, str]:
    await c.call(c.admin.remove_resource, f.get("uri", ""))
    return c.url("resources"), "resource-removed"


async def _add_user(c: Console, f: dict[str, str]) -> Response:
    password = f.get("password", "")
    generated = not password
    if generated:
        password = secrets.token_urlsafe(12)
    added = await c.call(
        c.admin.add_user, f.get("username", ""), password, admin=f.get("admin") == "on"
    )
    # the one page that shows the password: answered to the form, never stored (no-store)
    return c.render(
        "user-added",
        added=added,
        password=password if generated else "",
        users_url=c.url("users"),
    )


async def _set_admin(c: Console, f: dict[str, str]) -> tuple[str, str]:
    grant = f.get("grant") == "1"
    name = f.get("username", "")
    await c.call(c.admin.set_admin, name, grant)
    return c.url("users", name=name), "admin-granted" if grant else "admin-dropped"


async def _disable_user(c: Console, f: dict[str, str]) -> tuple[str, str]:
    name = f.get("username", "")
    disabled = f.get("disabled") == "1"
    await c.call(c.admin.disable_user, name, disabled)
    return c.url("users", name=name), "user-disabled" if disabled else "user-enabled"


async def _remove_user(c: Console, f: dict[str, str]) -> tuple[str, str]:
    await c.call(c.admin.remove_user, f.get("username", ""))
    return c.url("users"), "user-removed"


async def _reset_mfa(c: Console, f: dict[str, str]) -> tuple[str, str]:
    name = f.get("username", "")
    await c.call(c.admin.reset_mfa, name)
    return c.url("users", name=name), "mfa-reset"


async def _revoke(c: Console, f: dict[str, str]) -> tuple[str, str]:
    name = f.get("username", "")
    await c.call(c.admin.revoke_grants, name, grant_id=f.get("grant_id") or None)
    return c.url("users", name=name), "grants-revoked"


async def _end_sessions(c: Console, f: dict[str, str]) -> tuple[str, str]:
    name = f.get("username", "")
    await c.call(c.admin.end_sessions, name)
    return c.url("users", name=name), "sessions-ended"


async def _rotate(c: Console, f: dict[str, str]) -> tuple[str, str]:
    await c.call(c.admin.rotate_keys)
    return c.url("keys"), "keys-rotated"


ACTIONS = {
    "client-remove": Action(True, _remove_client),
    "client-disable": Action(True, _disable_client),
    "resource-add": Action(False, _add_resource),
    "resource-scopes": Action(False, _edit_resource),
    "resource-remove": Action(True, _remove_resource),
    "user-add": Action(False, _add_user),
    "user-admin": Action(True, _set_admin),
    "user-remove": Action(True, _remove_user),
    "user-disable": Action(True, _disable_user),
    "user-reset-mfa": Action(True, _reset_mfa),
    "grant-revoke": Action(True, _revoke),
    "sessions-end": Action(True, _end_sessions),
    "keys-rotate": Action(True, _rotate),
}


async def act(request: Request) -> Response:
    """POST ``/admin/do/{action}``: one console form, refused unless it is genuine (same
    site, the session's token) and, for a destructive step, the sign-in recent."""
    console = await _console(request)
    if isinstance(console, Response):
        return console
    c = console
    action = ACTIONS.get(request.path_params.get("action", ""))
    if action is None:
        return _not_found(c, "", "There is no such action.")
    refused = refuse_cross_site(c.ctx.settings.issuer, request)
    if refused is not None:
        return refused
    form = await request.form(max_files=0, max_fields=10, max_part_size=MAX_FIELD)
    fields = {k: v[:MAX_FIELD] for k, v in form.items() if isinstance(v, str)}
    if not csrf.csrf_valid(c.ctx.cookie_secret, c.browser.sid, PURPOSE, fields.get("csrf_token")):
        return error_page(
            "invalid_request",
            "The console page had expired, so nothing was changed. Reload it and try again.",
            403,
            title="This page has expired",
            back_url=c.url(""),
            back_label="Back to the console",
        )
    if action.destructive and not recent(c.browser, c.ctx.now()):
        return error_page(
            "access_denied",
            f"This step needs a sign-in in the last {RECENT // 60} minutes, so nothing was "
            "changed. Sign out on your account page, sign in again, and do it then.",
            403,
            title="Sign in again to do this",
            back_url=c.ctx.endpoint_url("account"),
            back_label="Go to your account",
        )
    try:
        outcome = await action.run(c, fields)
    except AdminError as exc:
        return error_page(
            "invalid_request",
            f"Nothing was changed: {exc}.",
            400,
            title="This can't be done",
            back_url=c.url(""),
            back_label="Back to the console",
        )
    if isinstance(outcome, Response):
        return outcome
    url, notice = outcome
    return see_other(url + ("&" if "?" in url else "?") + urlencode({"done": notice}))
