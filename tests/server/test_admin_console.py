"""The admin console (/admin): administrators only (anyone else a 403 page, the signed-out sent
to sign in), every form behind the CSRF token and same-site checks, destructive steps behind a
recent sign-in, each action the admin API's operation and audited under the administrator's
name, and no secret ever shown."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app
from mcpauth.server.admin_console import ACTIONS, NOTICES, RECENT
from mcpauth.server.storage import prune

from ..conftest import ISSUER
from ..oauth import Form, forms, submit
from .conftest import PASSWORD, add_user
from .mfa_support import Clock
from .test_token import refresh, tokens

pytestmark = pytest.mark.anyio
PAGES = ("admin", "admin/clients", "admin/resources", "admin/users", "admin/keys")
PAGES += ("admin/upstream", "admin/audit", "admin/users?name=alice")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(make_settings: Callable[..., Settings], clock: Clock) -> Starlette:
    return create_app(make_settings(), clock=clock)


@pytest.fixture
def root(seeded: Starlette, password_hash: str) -> Starlette:
    """``root``, an administrator (alice and bob are not)."""
    add_user(seeded, "root", password_hash)
    admin.set_admin(seeded.state.mcpauth, "root", True)
    return seeded


def browser(app: Starlette) -> httpx2.AsyncClient:
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.9", 50000))
    return httpx2.AsyncClient(transport=transport, base_url=ISSUER)


async def sign_in(http: httpx2.AsyncClient, username: str) -> None:
    page = await http.get("/account")
    response = await submit(http, page, {"username": username, "password": PASSWORD})
    assert response.status_code == 303, response.text


def form_for(page: httpx2.Response, action: str, **fields: str) -> tuple[str, Form]:
    """The form of ``page`` posting to the console action ``action`` whose hidden fields
    include ``fields``."""
    for form in forms(page.text):
        if form.action.endswith(f"/admin/do/{action}") and all(
            form.fields.get(k) == v for k, v in fields.items()
        ):
            return urljoin(str(page.request.url), html.unescape(form.action)), form
    raise AssertionError(f"no {action} form with {fields} on {page.request.url}")


async def post(
    http: httpx2.AsyncClient,
    path: str,
    action: str,
    values: dict[str, str] | None = None,
    **match: str,
) -> httpx2.Response:
    page = await http.get(path)
    assert page.status_code == 200, page.text
    url, form = form_for(page, action, **match)
    return await http.post(url, data={**form.fields, **(values or {})})


def events(app: Starlette, **search: Any) -> list[dict[str, Any]]:
    return list(admin.search_audit(app.state.mcpauth, **search))


async def test_signed_out_people_are_sent_to_sign_in_first(root: Starlette) -> None:
    async with browser(root) as http:
        for path in PAGES:
            response = await http.get(f"/{path}")
            assert response.status_code == 303
            assert response.headers["location"] == f"{ISSUER}/account"
        refused = await http.post("/admin/do/keys-rotate", data={"csrf_token": "x"})
        assert refused.status_code == 303


async def test_a_person_who_is_not_an_administrator_gets_a_403_page_and_changes_nothing(
    root: Starlette,
) -> None:
    kids = [k["kid"] for k in admin.list_keys(root.state.mcpauth)]
    async with browser(root) as http:
        await sign_in(http, "alice")
        for path in PAGES:
            page = await http.get(f"/{path}")
            assert page.status_code == 403
            assert "Administrators only" in page.text
            assert "your account is not one" in page.text
            assert "Signing keys" not in page.text
        account = await http.get("/account")
        token = forms(account.text)[-1].fields["csrf_token"]
        refused = await http.post("/admin/do/keys-rotate", data={"csrf_token": token})
    assert refused.status_code == 403
    assert [k["kid"] for k in admin.list_keys(root.state.mcpauth)] == kids
    assert events(root, event="admin.keys_rotated") == []


async def test_dropping_an_administrator_closes_the_console_to_her_at_once(
    root: Starlette,
) -> None:
    async with browser(root) as http:
        await sign_in(http, "root")
        assert (await http.get("/admin")).status_code == 200
        admin.set_admin(root.state.mcpauth, "root", False)
        assert (await http.get("/admin")).status_code == 403


@pytest.mark.parametrize("path", PAGES)
async def test_each_page_is_shown_to_an_administrator_in_the_sign_in_pages_look(
    root: Starlette, path: str
) -> None:
    async with browser(root) as http:
        await sign_in(http, "root")
        page = await http.get(f"/{path}")
    assert page.status_code == 200, page.text
    assert page.headers["cache-control"] == "no-store"
    assert "script-src" not in page.headers["content-security-policy"]
    assert "<script" not in page.text
    assert '<main class="wide">' in page.text
    assert 'aria-label="Administration"' in page.text
    assert "Signed in as <strong>root</strong>" in page.text


async def test_a_form_without_the_sessions_token_or_from_another_site_changes_nothing(
    root: Starlette,
) -> None:
    uri = "https://new.example.com/mcp"
    async with browser(root) as http:
        await sign_in(http, "root")
        stale = await post(
            http, "/admin/resources", "resource-add", {"uri": uri, "csrf_token": "x"}
        )
        assert stale.status_code == 403
        assert "This page has expired" in stale.text
        page = await http.get("/admin/resources")
        url, form = form_for(page, "resource-add")
        crossed = await http.post(
            url, data={**form.fields, "uri": uri}, headers={"origin": "https://evil.example"}
        )
        assert crossed.status_code == 403
        assert "another website" in crossed.text
        # the token is the session's: another administrator's does not do
        async with browser(root) as other:
            await sign_in(other, "root")
            theirs = await other.get("/admin/resources")
            _, their_form = form_for(theirs, "resource-add")
        mixed = await http.post(
            url, data={**form.fields, "uri": uri, "csrf_token": their_form.fields["csrf_token"]}
        )
        assert mixed.status_code == 403
    assert uri not in [r["uri"] for r in admin.list_resources(root.state.mcpauth)]
    added = events(root, event="admin.resource_added")
    assert uri not in [e["details"]["resource"] for e in added]


async def test_destructive_steps_need_a_recent_sign_in_others_do_not(
    root: Starlette, clock: Clock
) -> None:
    ctx = root.state.mcpauth
    kids = [k["kid"] for k in admin.list_keys(ctx)]
    async with browser(root) as http:
        await sign_in(http, "root")
        page = await http.get("/admin/keys")
        clock.now += RECENT + 1
        url, form = form_for(page, "keys-rotate")
        stale = await http.post(url, data=form.fields)
        assert stale.status_code == 403
        assert "Sign in again to do this" in stale.text
        assert [k["kid"] for k in admin.list_keys(ctx)] == kids
        assert "need a sign-in in the last 15 minutes" in (await http.get("/admin/keys")).text
        added = await post(
            http, "/admin/resources", "resource-add", {"uri": "https://late.example/mcp"}
        )
        assert added.status_code == 303
    async with browser(root) as http:
        await sign_in(http, "root")  # signed in again: recent
        rotated = await post(http, "/admin/keys", "keys-rotate")
        assert rotated.status_code == 303
    assert len(admin.list_keys(ctx)) == len(kids) + 1


def test_every_destructive_action_is_marked_so() -> None:
    destructive = {name for name, action in ACTIONS.items() if action.destructive}
    assert destructive == {
        "client-remove",
        "client-disable",
        "resource-remove",
        "user-admin",
        "user-remove",
        "user-disable",
        "user-reset-mfa",
        "grant-revoke",
        "sessions-end",
        "keys-rotate",
    }


async def test_an_administrator_adds_edits_and_removes_a_resource_each_step_audited(
    root: Starlette,
) -> None:
    uri = "https://files.example.com/mcp"
    async with browser(root) as http:
        await sign_in(http, "root")
        added = await post(
            http,
            "/admin/resources",
            "resource-add",
            {"uri": uri, "name": "Files", "scopes": "files:read=Read your files\nfiles:write"},
        )
        assert added.status_code == 303
        shown = await http.get(added.headers["location"])
        assert NOTICES["resource-added"] in shown.text
        assert admin.list_resources(root.state.mcpauth)[-1]["scopes"] == {
            "files:read": "Read your files",
            "files:write": "",
        }
        edited = await post(
            http, "/admin/resources", "resource-scopes", {"scopes": "files:read"}, uri=uri
        )
        assert edited.status_code == 303
        found = [r for r in admin.list_resources(root.state.mcpauth) if r["uri"] == uri]
        assert found[0]["scopes"] == {"files:read": ""}
        bad = await post(http, "/admin/resources", "resource-add", {"uri": "not a url"})
        assert bad.status_code == 400
        assert "Nothing was changed" in bad.text
        removed = await post(http, "/admin/resources", "resource-remove", uri=uri)
        assert removed.status_code == 303
    assert uri not in [r["uri"] for r in admin.list_resources(root.state.mcpauth)]
    trail = events(root, event="admin.")
    assert [e["event"] for e in trail[:3]] == [
        "admin.resource_removed",
        "admin.resource_changed",
        "admin.resource_added",
    ]
    assert {e["actor"] for e in trail[:3]} == {"root"}
    assert trail[2]["details"]["resource"] == uri


async def test_revoking_a_persons_grant_kills_her_refresh_token_and_is_audited(
    root: Starlette, http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    issued = await tokens(http, public_client)  # alice's
    async with browser(root) as console:
        await sign_in(console, "root")
        person = await console.get("/admin/users?name=alice")
        assert "Test client" in person.text
        url, form = form_for(person, "grant-revoke", username="alice")
        revoked = await console.post(url, data=form.fields)
        assert revoked.status_code == 303
        after = await console.get(revoked.headers["location"])
        assert NOTICES["grants-revoked"] in after.text
        assert "No live grant." in after.text
    dead = await refresh(http, public_client["client_id"], issued["refresh_token"])
    assert dead.json()["error"] == "invalid_grant"
    found = events(
        root, user="alice", client=public_client["client_id"], event="admin.grant_revoked"
    )
    assert len(found) == 1
    assert found[0]["actor"] == "root"
    assert found[0]["details"]["grant_id"] == form.fields["grant_id"]


async def test_an_administrator_signs_a_person_out_everywhere(root: Starlette) -> None:
    async with browser(root) as alice:
        await sign_in(alice, "alice")
        async with browser(root) as console:
            await sign_in(console, "root")
            person = await console.get("/admin/users?name=alice")
            assert "Signed in " in person.text
            ended = await post(console, "/admin/users?name=alice", "sessions-end")
            assert ended.status_code == 303
        assert "password" in forms((await alice.get("/account")).text)[0].fields
    assert events(root, user="alice", event="admin.sessions_ended")[0]["details"] == {
        "sessions": "1"
    }


async def test_rotating_keys_publishes_a_new_one_and_is_audited(root: Starlette) -> None:
    before = {k["kid"] for k in admin.list_keys(root.state.mcpauth)}
    async with browser(root) as http:
        await sign_in(http, "root")
        rotated = await post(http, "/admin/keys", "keys-rotate")
        assert rotated.status_code == 303
        page = await http.get(rotated.headers["location"])
    new = {k["kid"] for k in admin.list_keys(root.state.mcpauth)} - before
    assert len(new) == 1
    assert next(iter(new)) in page.text
    found = events(root, event="admin.keys_rotated")
    assert [e["details"]["kid"] for e in found] == list(new)


async def test_a_new_users_generated_password_is_shown_once_and_never_again(
    root: Starlette,
) -> None:
    async with browser(root) as http:
        await sign_in(http, "root")
        added = await post(http, "/admin/users", "user-add", {"username": "carol"})
        assert added.status_code == 200
        assert added.headers["cache-control"] == "no-store"
        shown = re.search(r'<code class="secret">([^<]+)</code>', added.text)
        assert shown is not None
        password = html.unescape(shown.group(1))
        for path in ("/admin/users", "/admin/users?name=carol", "/admin/audit"):
            assert password not in (await http.get(path)).text
        chosen = await post(
            http, "/admin/users", "user-add", {"username": "dave", "password": "a long password"}
        )
        assert "a long password" not in chosen.text
        assert 'class="secret"' not in chosen.text
    async with browser(root) as carol:
        page = await carol.get("/account")
        signed = await submit(carol, page, {"username": "carol", "password": password})
        assert signed.status_code == 303
    trail = events(root, event="admin.user_added")
    assert [e["username"] for e in trail] == ["dave", "carol"]
    assert all(password not in str(e) for e in events(root))


async def test_a_client_is_inspected_without_its_secret_and_removed(root: Starlette) -> None:
    made = admin.add_client(root.state.mcpauth, name="Backend", grant_types=["client_credentials"])
    secret = made["client_secret"]
    async with browser(root) as http:
        await sign_in(http, "root")
        listing = await http.get("/admin/clients")
        assert "Backend" in listing.text
        page = await http.get("/admin/clients", params={"client_id": made["client_id"]})
        assert page.status_code == 200
        assert made["client_id"] in page.text
        assert secret not in page.text
        assert "never again" in page.text
        missing = await http.get("/admin/clients", params={"client_id": "nobody"})
        assert missing.status_code == 404
        url, form = form_for(page, "client-remove", client_id=made["client_id"])
        removed = await http.post(url, data=form.fields)
        assert removed.status_code == 303
    assert made["client_id"] not in [c["client_id"] for c in admin.list_clients(root.state.mcpauth)]
    assert (
        events(root, client=made["client_id"], event="admin.client_removed")[0]["actor"] == "root"
    )
    assert all(secret not in str(e) for e in events(root))


async def test_users_are_made_administrators_reset_and_removed_from_the_console(
    root: Starlette,
) -> None:
    ctx = root.state.mcpauth
    async with browser(root) as http:
        await sign_in(http, "root")
        made = await post(http, "/admin/users?name=bob", "user-admin", username="bob")
        assert made.status_code == 303
        assert [u["admin"] for u in admin.list_users(ctx) if u["username"] == "bob"] == [True]
        reset = await post(http, "/admin/users?name=bob", "user-reset-mfa", username="bob")
        assert reset.status_code == 303
        removed = await post(http, "/admin/users?name=bob", "user-remove", username="bob")
        assert removed.status_code == 303
        gone = await http.get("/admin/users?name=bob")
        assert gone.status_code == 404
    assert "bob" not in [u["username"] for u in admin.list_users(ctx)]
    names = [e["event"] for e in events(root, user="bob", event="admin.")]
    assert names == [
        "admin.user_removed",
        "admin.mfa_reset",
        "admin.admin_granted",
    ]


async def test_the_audit_log_is_searched_by_user_client_event_and_time(
    root: Starlette, clock: Clock
) -> None:
    async with browser(root) as alice:
        await sign_in(alice, "alice")  # a request's event: written by the trail's next flush
    async with browser(root) as http:
        await sign_in(http, "root")
        page = await http.get("/admin/audit", params={"user": "alice", "event": "login.success"})
        assert page.status_code == 200
        assert "1 event<" in page.text
        assert "login.success" in page.text
        later = await http.get(
            "/admin/audit", params={"user": "alice", "since": "2999-01-01T00:00"}
        )
        assert "0 events" in later.text
        bad = await http.get("/admin/audit", params={"since": "yesterday"})
        assert bad.status_code == 400
        assert "not a date and time" in bad.text


def test_audit_events_are_pruned_after_the_retention(
    root: Starlette, clock: Clock, make_settings: Callable[..., Settings]
) -> None:
    ctx = root.state.mcpauth
    admin.rotate_keys(ctx)
    assert len(events(root, event="admin.keys_rotated")) == 1
    settings = make_settings(audit_retention=3600)
    assert prune.prune(ctx.db, settings, ctx.now() + 3599)["audit_events"] == 0
    assert prune.prune(ctx.db, settings, ctx.now() + 3601)["audit_events"] >= 1
    assert events(root, event="admin.keys_rotated") == []


def test_an_audit_row_holds_each_value_cut_to_its_column() -> None:
    from mcpauth.server.operations.audit_trail import MAX_VALUE, row_of

    fields: dict[str, Any] = {f"field{i}": "v" * 1000 for i in range(30)}
    row = row_of("e" * 100, {"client_id": "c" * 3000, "user_id": "u" * 100, **fields}, 7)
    assert len(row["event"]) == 64
    assert len(row["client_id"]) == 2048
    assert len(row["user_id"]) == 64
    assert row["username"] == row["actor"] == ""
    assert len(row["details"]) == 20
    assert {len(v) for v in row["details"].values()} == {MAX_VALUE}
    assert row["at"] == 7


async def test_a_disabled_client_is_refused_at_authorize_and_token_until_enabled(
    root: Starlette, http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    client_id = public_client["client_id"]
    issued = await tokens(http, public_client)
    async with browser(root) as console:
        await sign_in(console, "root")
        page = await console.get("/admin/clients", params={"client_id": client_id})
        url, form = form_for(page, "client-disable", client_id=client_id, disabled="1")
        disabled = await console.post(url, data=form.fields)
        assert disabled.status_code == 303
        shown = await console.get(disabled.headers["location"])
        assert "Disabled: refused at every endpoint" in shown.text
    refused = await refresh(http, client_id, issued["refresh_token"])
    assert refused.status_code == 401
    assert refused.json()["error"] == "invalid_client"
    authorize = await http.get(
        "/authorize", params={"client_id": client_id, "response_type": "code"}
    )
    assert authorize.status_code == 400
    assert "not recognised" in authorize.text
    admin.disable_client(root.state.mcpauth, client_id, False)
    working = await refresh(http, client_id, issued["refresh_token"])
    assert working.status_code == 200, working.text
    trail = [e["event"] for e in events(root, client=client_id, event="admin.")]
    assert trail == ["admin.client_enabled", "admin.client_disabled"]


async def test_a_disabled_user_is_signed_out_refused_sign_in_and_her_tokens_die(
    root: Starlette, http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    issued = await tokens(http, public_client)  # alice's, signed in on ``http``
    async with browser(root) as console:
        await sign_in(console, "root")
        disabled = await post(
            console, "/admin/users?name=alice", "user-disable", username="alice", disabled="1"
        )
        assert disabled.status_code == 303
        assert "<strong>Disabled</strong>" in (await console.get(disabled.headers["location"])).text
    dead = await refresh(http, public_client["client_id"], issued["refresh_token"])
    assert dead.json()["error"] == "invalid_grant"
    page = await http.get("/account")
    assert "password" in forms(page.text)[0].fields  # her session counts as signed out
    refused = await submit(http, page, {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 403
    assert "This account is disabled" in refused.text
    assert "password" in forms((await http.get("/account")).text)[0].fields
    admin.disable_user(root.state.mcpauth, "alice", False)
    async with browser(root) as again:
        await sign_in(again, "alice")
    trail = [e["event"] for e in events(root, user="alice", event="admin.")]
    assert trail == ["admin.user_enabled", "admin.user_disabled"]
    assert events(root, user="alice", event="login.disabled")
