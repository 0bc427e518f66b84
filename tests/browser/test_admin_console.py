"""The admin console in a real headless Chromium against a real `mcpauth serve` (docs/security.md
T50): an administrator signs in, adds a resource, revokes a person's grant (her refresh token
then fails at /token), rotates the signing keys and finds each action in the audit log's
search; a person who is not an administrator gets the 403 page. Each page passes axe (no
serious or critical violation, light and dark) and is screenshotted at desktop and phone
width."""

from __future__ import annotations

import re
from typing import Any

import httpx2
import pytest

from ..support import run_cli
from .conftest import PASSWORD, Server
from .test_pages import sign_in

pytestmark = pytest.mark.e2e

ADMIN = "root"
NEW_RESOURCE = "https://files.example.com/mcp"


def _authorized_refresh_token(server: Server, visit: Any, username: str) -> tuple[str, str]:
    """``username`` approves a new client in the browser; its client id and refresh token."""
    client_id = server.register("Console test client")
    url, verifier, _ = server.authorize_url(client_id)
    page = visit().page
    page.goto(url)
    sign_in(page, username)
    page.get_by_role("button", name="Approve").click()
    response = server.callback.wait()
    tokens = server.exchange(client_id, response["code"], verifier)
    return client_id, str(tokens["refresh_token"])


def menu(page: Any, name: str) -> None:
    """Follow the console's navigation link ``name``."""
    page.get_by_role("navigation", name="Administration").get_by_role("link", name=name).click()


def _refresh(server: Server, client_id: str, token: str) -> httpx2.Response:
    return httpx2.post(
        f"{server.issuer}/token",
        data={"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id},
    )


def test_an_administrator_adds_a_resource_revokes_a_grant_rotates_keys_and_finds_it_all(
    server: Server, visit: Any
) -> None:
    added = run_cli(
        ["users", "add", ADMIN, "--admin", "--password-stdin"], env=server.env, stdin=PASSWORD
    )
    assert added.returncode == 0, added.stderr
    client_id, refresh_token = _authorized_refresh_token(server, visit, "heidi")
    working = _refresh(server, client_id, refresh_token)
    assert working.status_code == 200, working.text
    refresh_token = working.json()["refresh_token"]

    tab = visit()
    page = tab.page
    page.goto(f"{server.issuer}/account")
    sign_in(page, ADMIN)
    page.get_by_role("heading", name="Connected applications").wait_for()
    page.goto(f"{server.issuer}/admin")
    assert page.get_by_role("heading", name="Administration").is_visible()
    tab.check("admin")

    menu(page, "Resources")
    page.get_by_label("URL of the MCP server").fill(NEW_RESOURCE)
    page.get_by_label("Name people see").fill("Team files")
    page.get_by_label(re.compile("^Scopes")).last.fill("files:read=Read the files")
    page.get_by_role("button", name="Add the resource").click()
    assert page.get_by_role("status").inner_text() == "The resource is added."
    assert page.get_by_role("group", name="Team files").is_visible()
    tab.check("admin-resources")

    menu(page, "Users")
    tab.check("admin-users")
    page.get_by_role("link", name="heidi").click()
    assert page.get_by_role("cell", name="Console test client", exact=True).is_visible()
    tab.check("admin-user")
    page.get_by_role("button", name=re.compile("Revoke the grant of Console test client")).click()
    assert page.get_by_role("status").inner_text().startswith("Revoked")
    dead = _refresh(server, client_id, refresh_token)
    assert dead.status_code == 400
    assert dead.json()["error"] == "invalid_grant"

    menu(page, "Signing keys")
    kids = page.locator("tbody code").all_inner_texts()
    page.get_by_role("button", name="Rotate the signing keys").click()
    assert page.get_by_role("status").inner_text() == "A new signing key is published."
    new = set(page.locator("tbody code").all_inner_texts()) - set(kids)
    assert len(new) == 1
    tab.check("admin-keys")

    menu(page, "Clients")
    tab.check("admin-clients")
    menu(page, "Providers")
    tab.check("admin-upstream")

    menu(page, "Audit log")
    page.get_by_label("Event (or a prefix: admin.)").fill("admin.")
    page.get_by_label("User (name or id)").fill("")
    page.get_by_role("button", name="Search").click()
    table = page.locator("tbody").inner_text()
    for event in ("admin.resource_added", "admin.grant_revoked", "admin.keys_rotated"):
        assert event in table, table
    assert next(iter(new)) in table
    assert NEW_RESOURCE in table
    tab.check("admin-audit")
    page.get_by_label("User (name or id)").fill("heidi")
    page.get_by_label("Event (or a prefix: admin.)").fill("admin.grant_revoked")
    page.get_by_role("button", name="Search").click()
    assert page.locator("tbody tr").count() == 1
    assert client_id in page.locator("tbody").inner_text()


def test_a_person_who_is_not_an_administrator_gets_the_403_page(server: Server, visit: Any) -> None:
    tab = visit()
    page = tab.page
    page.goto(f"{server.issuer}/account")
    sign_in(page, "ivan")
    page.get_by_role("heading", name="Connected applications").wait_for()
    response = page.goto(f"{server.issuer}/admin/users")
    assert response is not None
    assert response.status == 403
    assert page.get_by_role("heading", name="Administrators only").is_visible()
    tab.problems.expect_status(403)
    tab.check("admin-forbidden")
