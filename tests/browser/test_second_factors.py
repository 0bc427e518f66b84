"""Two-step sign-in in a real headless Chromium against a real `mcpauth serve` on
``localhost`` (browsers take no IP address as a WebAuthn RP ID): a passkey made on the account
page with Chromium's virtual authenticator (the DevTools protocol's WebAuthn domain), used to
sign in without a name and to authorize an MCP client; an authenticator app turned on with
codes from pyotp, asked for by a resource added with ``--require-mfa``; recovery codes that
work once each. Every new page is audited with axe-core (light and dark), screenshotted at
desktop and phone widths, and logs no console error."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyotp
import pytest

from mcpauth import jwt

from ..support import MCPAUTH, free_port, run_cli, running
from .conftest import PASSWORD, RESOURCE, SCOPES, Callback, Server, _callback_server

pytestmark = pytest.mark.e2e

PAYROLL = "http://127.0.0.1:8124/mcp"  # added with --require-mfa
PEOPLE = ("pat", "quinn", "rosa", "sam")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`mcpauth serve` with its issuer on localhost, two resources (one requiring two factors)
    and a few people, seeded with the admin commands."""
    folder = tmp_path_factory.mktemp("second-factor-server")
    port = free_port()
    issuer = f"http://localhost:{port}"
    env = {
        "MCPAUTH_DATABASE_URL": f"sqlite:///{folder / 'mcpauth.db'}",
        "MCPAUTH_SECRET_KEY": "second-factor-suite-secret-0123456789",
        "MCPAUTH_ISSUER": issuer,
        "MCPAUTH_SERVICE_NAME": "Example Corp sign-in",
    }
    for person in PEOPLE:
        added = run_cli(["users", "add", person, "--password-stdin"], env=env, stdin=PASSWORD)
        assert added.returncode == 0, added.stderr
    files = ["resources", "add", RESOURCE, "--name", "Example files", "--default"]
    for scope in SCOPES:
        files += ["--scope", scope]
    assert run_cli([*files, "--default-scope", "mcp:tools"], env=env).returncode == 0
    payroll = ["resources", "add", PAYROLL, "--name", "Payroll tools", "--require-mfa"]
    added = run_cli(
        [*payroll, "--scope", "payroll:read", "--default-scope", "payroll:read"], env=env
    )
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["require_mfa"] is True
    callback = Callback(f"http://127.0.0.1:{free_port()}/callback")
    receiver = _callback_server(callback)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        with running(
            [MCPAUTH, "serve", "--port", str(port)],
            ready_url=f"http://127.0.0.1:{port}/health",
            env=env,
            cwd=folder,
        ):
            yield Server(issuer, env, callback, admin_client_id="")
    finally:
        receiver.shutdown()
        receiver.server_close()


def virtual_authenticator(page: Any) -> tuple[Any, str]:
    """A platform authenticator that holds passkeys and verifies the person, on this tab: the
    DevTools session that controls it and its id."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    added = cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
            }
        },
    )
    return cdp, str(added["authenticatorId"])


def sign_in(page: Any, username: str) -> None:
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()


def next_code(secret: str) -> str:
    """The app's code of the next time step: one step ahead is accepted, and never the step a
    code was already used in."""
    return pyotp.TOTP(secret).at(time.time() + 30)


def approve_and_exchange(
    server: Server, page: Any, client_id: str, verifier: str, resource: str = RESOURCE
) -> dict[str, Any]:
    page.get_by_role("button", name=re.compile("Approve|Allow")).click()
    response = server.callback.wait()
    page.wait_for_load_state()
    assert "code" in response, response
    return server.exchange(client_id, response["code"], verifier, resource=resource)


def test_a_passkey_made_on_the_account_page_signs_in_and_authorizes_an_mcp_client(
    server: Server, visit: Any
) -> None:
    tab = visit()
    page = tab.page
    cdp, authenticator = virtual_authenticator(page)
    page.goto(f"{server.issuer}/account")
    sign_in(page, "pat")
    assert page.get_by_role("heading", name="Two-step sign-in").is_visible()
    tab.check("account-two-step")
    page.get_by_role("button", name="Add a passkey").click()
    page.wait_for_url(re.compile(r"notice=passkey-added"))
    assert "you can sign in with it now" in page.get_by_role("status").inner_text()
    assert page.get_by_role("button", name=re.compile("Remove Passkey added")).is_visible()
    tab.check("account-passkey-added")
    page.get_by_role("button", name="Sign out").click()
    assert page.get_by_role("status").inner_text() == "You have signed out."

    client_id = server.register("Inspector (test)")
    url, verifier, _ = server.authorize_url(client_id)
    page.goto(url)
    assert page.get_by_role("button", name="Sign in with a passkey").is_visible()
    tab.check("login-passkey")
    page.get_by_role("button", name="Sign in with a passkey").click()  # no name typed
    consent = page.get_by_role("heading", name="Authorize Inspector (test)?")
    consent.wait_for(timeout=30_000)  # the page's script asks the authenticator, then posts
    assert consent.is_visible()
    tokens = approve_and_exchange(server, page, client_id, verifier)
    assert jwt.unverified_claims(tokens["access_token"])["amr"] == ["hwk", "user", "mfa"]

    (credential,) = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})[
        "credentials"
    ]
    assert credential["rpId"] == "localhost"  # bound to the issuer's host
    assert credential["isResidentCredential"] is True
    assert credential["signCount"] >= 1


def test_an_app_code_is_asked_for_by_a_resource_that_requires_two_factors(
    server: Server, visit: Any
) -> None:
    tab = visit()
    page = tab.page
    page.goto(f"{server.issuer}/account")
    sign_in(page, "quinn")  # a password alone: this session has one factor
    page.get_by_role("button", name="Set up an authenticator app").click()
    assert page.get_by_role("heading", name="Set up an authenticator app").is_visible()
    assert page.get_by_role("img", name="QR code for the authenticator app").is_visible()
    secret = page.locator(".secret code").inner_text().replace(" ", "")
    tab.check("totp-enrol")
    page.get_by_label("Code from the app").fill("000000")
    page.get_by_role("button", name="Turn on").click()
    assert "didn't work" in page.get_by_role("alert").inner_text()
    page.get_by_label("Code from the app").fill(pyotp.TOTP(secret).now())
    page.get_by_role("button", name="Turn on").click()
    assert page.get_by_role("heading", name="Save your recovery codes").is_visible()
    assert page.locator("ol.codes li").count() == 10
    tab.check("recovery-codes")
    page.get_by_role("link", name="I've saved them").click()

    # the session signed in with a password alone: the payroll tools step it up
    client_id = server.register("Payroll assistant")
    url, verifier, _ = server.authorize_url(client_id, "payroll:read", resource=PAYROLL)
    page.goto(url)
    assert page.get_by_role("heading", name="Confirm it's you").is_visible()
    assert page.get_by_text("asks for a second step").is_visible()
    tab.check("second-factor-step-up")
    page.get_by_label("Code").fill(next_code(secret))
    page.get_by_role("button", name="Continue").click()
    assert page.get_by_text("Payroll tools").first.is_visible()
    tokens = approve_and_exchange(server, page, client_id, verifier, resource=PAYROLL)
    assert jwt.unverified_claims(tokens["access_token"])["amr"] == ["pwd", "otp", "mfa"]


def test_a_person_without_a_second_factor_is_told_how_to_set_one_up(
    server: Server, visit: Any
) -> None:
    tab = visit()
    page = tab.page
    client_id = server.register("Payroll assistant")
    page.goto(server.authorize_url(client_id, "payroll:read", resource=PAYROLL)[0])
    sign_in(page, "rosa")
    assert page.get_by_role("heading", name="Set up a second step first").is_visible()
    tab.problems.expect_status(403)
    tab.check("mfa-setup-needed")
    page.get_by_role("link", name="Go to your account").click()
    assert page.get_by_role("heading", name="Two-step sign-in").is_visible()


def test_recovery_codes_sign_in_once_each(server: Server, visit: Any) -> None:
    tab = visit()
    page = tab.page
    page.goto(f"{server.issuer}/account")
    sign_in(page, "sam")
    page.get_by_role("button", name="Set up an authenticator app").click()
    secret = page.locator(".secret code").inner_text().replace(" ", "")
    page.get_by_label("Code from the app").fill(pyotp.TOTP(secret).now())
    page.get_by_role("button", name="Turn on").click()
    codes = [c.strip() for c in page.locator("ol.codes li").all_inner_texts()]
    assert len(set(codes)) == 10

    def second_step(code: str, shot: str | None = None) -> Any:
        tab = visit()
        page = tab.page
        page.goto(f"{server.issuer}/account")
        sign_in(page, "sam")
        assert page.get_by_role("heading", name="Confirm it's you").is_visible()
        if shot is not None:
            tab.check(shot)
        page.get_by_label("Code").fill(code)
        page.get_by_role("button", name="Continue").click()
        return tab

    first = second_step(codes[0], "second-factor")
    assert first.page.get_by_text("9 recovery codes left").is_visible()
    again = second_step(codes[0])
    assert "didn't work" in again.page.get_by_role("alert").inner_text()
    again.check("second-factor-error")
    again.page.get_by_label("Code").fill(codes[1])
    again.page.get_by_role("button", name="Continue").click()
    assert again.page.get_by_text("8 recovery codes left").is_visible()
