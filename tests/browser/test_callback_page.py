"""The page `mcpauth login` shows when the browser comes back to the terminal: styled like the
server's pages, and it says "denied" when the user denied; audited and screenshotted like them."""

from __future__ import annotations

import io
import threading
from typing import Any

import pytest

from mcpauth.client.callback import LoopbackRedirectHandler


@pytest.mark.parametrize(
    ("query", "heading", "name"),
    [
        ("code=abc&state=xyz&iss=http%3A%2F%2F127.0.0.1", "Signed in", "cli-callback-signed-in"),
        ("error=access_denied&state=xyz", "Access denied", "cli-callback-denied"),
        (
            "error=invalid_scope&error_description=%3Cb%3Eno%3C%2Fb%3E",
            "Sign-in did not complete",
            "cli-callback-error",
        ),
    ],
)
def test_the_login_callback_page(visit: Any, query: str, heading: str, name: str) -> None:
    handler = LoopbackRedirectHandler(open_browser=False, timeout=15, out=io.StringIO())
    redirect_uri = handler.redirect_uri()
    returned: list[str] = []
    waiter = threading.Thread(target=lambda: returned.append(handler.authorize("http://x/")))
    waiter.start()
    tab = visit()
    tab.page.goto(f"{redirect_uri}?{query}")
    waiter.join(timeout=15)
    assert returned == [f"{redirect_uri}?{query}"]
    assert tab.page.get_by_role("heading", name=heading).is_visible()
    if "invalid_scope" in query:
        assert "<b>no</b>" in tab.page.get_by_role("status").inner_text()  # shown, not markup
    tab.check(name)
