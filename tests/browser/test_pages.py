"""Every page a person sees, in a real headless Chromium against a real `mcpauth serve`: sign-in,
wrong password, lockout, consent (first time, remembered, step-up, deny), the account page
(list, revoke with confirmation, sign out), error pages, keyboard-only use, a phone-width
viewport and JavaScript turned off. Each page is audited with axe-core (no serious or critical
violation, light and dark), screenshotted at 1280 and 390 px, and must log no console error
and no failed request."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest

from .conftest import MAX_FAILURES, PASSWORD, Server

pytestmark = pytest.mark.e2e


def sign_in(page: Any, username: str, password: str = PASSWORD) -> None:
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_sign_in_and_consent_deliver_code_state_and_iss_and_account_revokes(
    server: Server, visit: Any
) -> None:
    client_id = server.register("Inspector (test)")
    url, verifier, state = server.authorize_url(client_id)
    tab = visit()
    page = tab.page
    page.goto(url)
    assert page.get_by_role("heading", name="Sign in").is_visible()
    assert page.get_by_text("to continue to Inspector (test)").is_visible()
    tab.check("login")
    sign_in(page, "alice")
    page.wait_for_url(re.compile(r"/interaction/"))
    assert page.get_by_role("heading", name="Authorize Inspector (test)?").is_visible()
    assert page.get_by_text("Unverified").first.is_visible()
    assert page.get_by_text("Call the tools").is_visible()
    tab.check("consent")
    page.get_by_role("button", name="Approve").click()
    response = server.callback.wait()
    page.wait_for_load_state()
    assert set(response) == {"code", "state", "iss"}
    assert response["state"] == state
    assert response["iss"] == server.issuer  # RFC 9207
    tokens = server.exchange(client_id, response["code"], verifier)

    page.goto(f"{server.issuer}/account")
    assert page.get_by_role("heading", name="Connected applications").is_visible()
    assert page.get_by_role("heading", name=re.compile("Inspector \\(test\\)")).is_visible()
    tab.check("account")
    page.get_by_role("link", name=re.compile("Revoke access for Inspector")).click()
    assert page.get_by_role("heading", name="Revoke access for Inspector (test)?").is_visible()
    tab.check("revoke-confirm")
    page.get_by_role("button", name="Revoke access").click()
    assert page.get_by_role("status").inner_text() == "Access for Inspector (test) was revoked."
    assert page.get_by_text("No application is connected to your account.").is_visible()
    tab.check("account-revoked")
    refreshed = httpx2.post(
        f"{server.issuer}/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens.get("refresh_token", "none"),
            "client_id": client_id,
        },
    )
    assert refreshed.status_code == 400  # the grant is gone

    page.get_by_role("button", name="Sign out").click()
    assert page.get_by_role("status").inner_text() == "You have signed out."
    assert page.get_by_label("Password").is_visible()
    tab.check("signed-out")


def test_a_wrong_password_says_so_and_focuses_the_password_field(
    server: Server, visit: Any
) -> None:
    tab = visit()
    page = tab.page
    page.goto(server.authorize_url(server.register())[0])
    sign_in(page, "bob", "not the password")
    assert page.get_by_role("alert").inner_text() == "Wrong username or password."
    assert page.get_by_label("Username").input_value() == "bob"
    assert page.get_by_label("Password").get_attribute("aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "password"
    tab.check("login-error")
    sign_in(page, "bob")
    assert page.get_by_role("button", name="Approve").is_visible()


def test_repeated_failures_show_the_lockout_page_with_the_wait_and_a_retry_link(
    server: Server, visit: Any
) -> None:
    tab = visit()
    page = tab.page
    start = server.authorize_url(server.register())[0]
    page.goto(start)
    for _ in range(MAX_FAILURES):
        sign_in(page, "carol", "wrong")
    sign_in(page, "carol")  # even the right password waits now
    assert page.get_by_role("heading", name="Sign-in paused").is_visible()
    assert "about 5 minutes" in page.get_by_role("alert").inner_text()
    tab.problems.expect_status(429)
    tab.check("locked")
    page.get_by_role("link", name="Try again").click()
    assert page.get_by_role("heading", name="Sign in").is_visible()


def test_consent_is_remembered_then_asked_again_for_a_wider_scope_with_the_new_one_marked(
    server: Server, visit: Any
) -> None:
    client_id = server.admin_client_id  # admin-registered: remembered consent applies
    tab = visit()
    page = tab.page
    page.goto(server.authorize_url(client_id)[0])
    sign_in(page, "dave")
    assert page.get_by_text("Registered by your administrator").is_visible()
    assert page.get_by_text("Unverified").count() == 0
    page.get_by_role("button", name="Approve").click()
    assert "code" in server.callback.wait()

    page.goto(server.authorize_url(client_id)[0])  # remembered: no page at all
    assert "code" in server.callback.wait()

    page.goto(server.authorize_url(client_id, "mcp:tools mcp:admin")[0])
    assert page.get_by_role("heading", name="Example Desktop asks for more access").is_visible()
    new = page.locator("ul.scopes li.new")
    assert new.count() == 1
    assert "Use the administrative tools" in new.inner_text()
    assert (new.text_content() or "").startswith("New ")
    tab.check("consent-step-up")
    page.get_by_role("button", name="Allow more access").click()
    assert "code" in server.callback.wait()


def test_deny_sends_access_denied_to_the_application(server: Server, visit: Any) -> None:
    tab = visit()
    page = tab.page
    url, _, state = server.authorize_url(server.register())
    page.goto(url)
    sign_in(page, "erin")
    page.get_by_role("button", name="Deny").click()
    response = server.callback.wait()
    assert response["error"] == "access_denied"
    assert response["state"] == state
    assert response["iss"] == server.issuer
    tab.problems.assert_none()


def test_error_pages_explain_in_plain_words(server: Server, visit: Any) -> None:
    tab = visit()
    page = tab.page
    page.goto(
        f"{server.issuer}/authorize?" + urlencode({"client_id": "nobody", "response_type": "code"})
    )
    assert page.get_by_role("heading").first.inner_text() == "This application is not recognised"
    assert page.get_by_text("Error code: invalid_client").is_visible()
    tab.problems.expect_status(400)
    tab.check("error-unknown-client")
    response = page.goto(f"{server.issuer}/no/such/page")
    assert response is not None
    assert response.status == 404
    assert page.get_by_role("heading", name="Page not found").is_visible()
    tab.problems.expect_status(404)
    tab.check("error-not-found")
    page.goto(f"{server.issuer}/interaction/expired-or-made-up")
    assert page.get_by_role("heading", name="This page has expired").is_visible()
    tab.problems.expect_status(400)
    tab.check("error-expired")


def test_a_stale_form_gets_a_page_with_the_way_back(server: Server, visit: Any) -> None:
    tab = visit()
    page = tab.page
    page.goto(server.authorize_url(server.register())[0])
    page.locator("input[name=csrf_token]").evaluate("field => field.value = 'stale'")
    sign_in(page, "frank")
    assert page.get_by_role("heading", name="This page has expired").is_visible()
    tab.problems.expect_status(403)
    tab.check("error-stale-form")
    page.get_by_role("link", name="Sign in again").click()
    sign_in(page, "frank")
    assert page.get_by_role("button", name="Approve").is_visible()
    tab.problems.assert_none()


def test_a_form_from_another_browser_session_is_refused_in_words(
    server: Server, visit: Any
) -> None:
    tab = visit()
    page = tab.page
    page.goto(server.authorize_url(server.register())[0])
    page.context.clear_cookies()  # the session the sign-in request belonged to is gone
    sign_in(page, "frank")
    assert "belongs to another browser session" in page.get_by_role("alert").inner_text()
    tab.problems.expect_status(403)
    tab.problems.assert_none()


def test_keyboard_alone_completes_sign_in_and_consent(server: Server, visit: Any) -> None:
    tab = visit()
    page = tab.page
    url, _, state = server.authorize_url(server.register())
    page.goto(url)
    assert page.evaluate("document.activeElement.id") == "username"  # autofocus
    page.keyboard.type("grace")
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Approve").wait_for()
    for _ in range(20):  # Tab through the page until Approve has the focus
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.value") == "approve":
            break
    assert page.evaluate("document.activeElement.value") == "approve"
    page.keyboard.press("Enter")
    assert server.callback.wait()["state"] == state
    tab.problems.assert_none()


def test_a_phone_sized_browser_without_javascript_completes_the_flow(
    server: Server, visit: Any
) -> None:
    tab = visit(javascript=False, width=390)
    page = tab.page
    url, _, state = server.authorize_url(server.register())
    page.goto(url)
    sign_in(page, "heidi")
    page.get_by_role("button", name="Approve").click()
    response = server.callback.wait()
    assert response["state"] == state
    tab.problems.assert_none()


def test_a_form_posted_from_another_site_is_refused_even_with_a_leaked_csrf_token(
    server: Server, visit: Any
) -> None:
    tab = visit()
    page = tab.page
    page.goto(server.authorize_url(server.register())[0])
    form = page.locator("form")
    action = form.get_attribute("action") or ""
    token = page.locator("input[name=csrf_token]").input_value()
    login_url = page.url
    # a page of another origin (same host, another port: same-site, not same-origin)
    attacker = server.callback.url.replace("/callback", "/attacker")
    page.goto(f"{attacker}?{urlencode({'action': action, 'csrf': token})}")
    page.get_by_role("button", name="Claim").click()
    assert page.get_by_role("heading", name="This form came from another website").is_visible()
    tab.problems.expect_status(403)
    tab.problems.assert_none()
    page.goto(login_url)  # the request is still waiting for a sign-in: judy was not signed in
    assert page.get_by_label("Password").is_visible()
