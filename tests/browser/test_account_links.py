"""Linking an identity provider to an existing account in a real headless Chromium
(docs/security.md T41): a person with a local password account signs in on /account, presses
"Link Example Corp", signs in at a real node-oidc-provider and comes back linked; in another
browser, signing in through the provider reaches that same account (no account made just in
time); "Remove" unlinks it. The account page's new section passes the axe audit."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ..support import run_cli
from .test_upstream_sign_in import (  # noqa: F401 - the module's world, used by name
    World,
    claims_of,
    sign_in_at_the_provider,
    world,
)

pytestmark = pytest.mark.e2e

PASSWORD = "carol's long passphrase"


def test_a_signed_in_person_links_the_provider_and_then_signs_in_with_it(
    world: World,  # noqa: F811
    visit: Any,
) -> None:
    added = run_cli(["users", "add", "carol", "--password-stdin"], env=world.env, stdin=PASSWORD)
    assert added.returncode == 0, added.stderr
    carol = next(u["id"] for u in world.users() if u["username"] == "carol")
    tab = visit()
    page = tab.page
    page.goto(f"{world.issuer}/account")
    page.get_by_label("Username").fill("carol")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    assert page.get_by_role("heading", name="Ways to sign in").is_visible()
    assert page.get_by_text("Username and password").is_visible()
    tab.check("account-ways-to-sign-in")
    page.get_by_role("button", name="Link Example Corp").click()
    page.wait_for_url(re.compile(re.escape(world.corp) + "/interaction/"))
    sign_in_at_the_provider(page, "bob")  # bob@example.com at Example Corp
    page.wait_for_url(f"{world.issuer}/account?linked=corp")
    assert "Example Corp is linked" in page.get_by_role("status").inner_text()
    methods = page.get_by_role("list", name="Ways to sign in")
    assert methods.get_by_text("bob@example.com").is_visible()
    assert page.get_by_text("Signed in as carol").is_visible()  # still carol's account
    assert page.get_by_role("button", name="Link Example Corp").count() == 0
    assert page.get_by_role("button", name="Link Other Corp").is_visible()
    # the provider's own pages (a web font from the internet) are not ours to audit
    tab.problems.console_errors.clear()
    tab.problems.failed_requests.clear()
    tab.check("account-linked")
    users = world.users()

    # another browser: signing in through the provider is signing in to carol's account
    client_id = world.register()
    url, verifier = world.authorize_url(client_id)
    other = visit().page
    other.goto(url)
    other.get_by_role("button", name="Continue with Example Corp").click()
    other.wait_for_url(re.compile(re.escape(world.corp) + "/interaction/"))
    sign_in_at_the_provider(other, "bob")
    other.wait_for_url(re.compile(re.escape(world.issuer) + "/interaction/"))
    claims = claims_of(world.approve(other, client_id, verifier))
    assert claims["sub"] == carol
    assert world.users() == users  # no account made just in time

    # remove it again: the provider no longer signs in to carol's account
    page.get_by_role("button", name="Remove Example Corp").click()
    page.wait_for_url(f"{world.issuer}/account?unlinked=corp")
    assert "no longer signs you in" in page.get_by_role("status").inner_text()
    assert page.get_by_role("button", name="Link Example Corp").is_visible()
