"""The device grant as a person meets it, in Chromium: `mcpauth login URL --device` runs as a
process and prints a URL and a code; the person opens the URL, mistypes the code once (told so
in plain words), types it again in lower case without the dash, signs in, reads a consent page
that names the client, the service and the scopes and warns about codes sent by others, and
approves; the command finishes and its token works at the protected MCP server."""

from __future__ import annotations

from typing import Any

from tests.client.test_e2e_device import device_login, works_at_the_mcp_server
from tests.client.test_e2e_server import PASSWORD, USER, Stack, stack  # noqa: F401

from .test_pages import sign_in


def test_mcpauth_login_device_completes_when_the_person_approves_in_chromium(
    stack: Stack,  # noqa: F811
    visit: Any,
) -> None:
    with device_login(stack.resource, stack.env) as login:
        url, code = login.shown()
        tab = visit()
        page = tab.page
        page.goto(url)
        page.get_by_role("heading", name="Connect a device").wait_for()
        tab.check("device-code")
        wrong = "CCCC-CCCC" if code != "CCCC-CCCC" else "DDDD-DDDD"
        page.get_by_label("Code").fill(wrong)
        page.get_by_role("button", name="Continue").click()
        page.get_by_text("That code is not right").wait_for()
        tab.problems.expect_status(400)  # the form again, answered 400 on purpose
        tab.check("device-code-wrong")
        page.get_by_label("Code").fill(code.replace("-", " ").lower())
        page.get_by_role("button", name="Continue").click()
        sign_in(page, USER, PASSWORD)
        page.get_by_role("heading", name="Authorize mcpauth?").wait_for()
        text = page.locator("main").inner_text()
        assert "Registered by itself, to sign in on a device" in text
        assert "showed you a code" in text
        assert "tools:read" in text
        tab.check("device-consent")
        page.get_by_role("button", name="Approve").click()
        page.get_by_role("heading", name="Device connected").wait_for()
        tab.check("device-connected")
        assert login.finish() == 0, login.output
    works_at_the_mcp_server(stack.resource, stack.env)
