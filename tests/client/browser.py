"""A stand-in for the system browser: follows the authorization URL, signs in and approves.

In process use :func:`visit`; as ``$BROWSER`` (``python browser.py %s``) it reads the account from
``MCPAUTH_TEST_USERNAME`` / ``MCPAUTH_TEST_PASSWORD`` (without them it only follows redirects).
"""

from __future__ import annotations

import os
import sys
from html.parser import HTMLParser

import httpx2


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self.names: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form" and self.action is None:
            self.action = values.get("action", "")
        elif tag == "input" and "name" in values:
            self.names.add(values["name"])
            if values.get("type") == "hidden":
                self.fields[values["name"]] = values.get("value", "")


def visit(url: str, username: str | None = None, password: str | None = None) -> httpx2.Response:
    """Open ``url``; submit the login form and approve consent until no form is left."""
    with httpx2.Client(follow_redirects=True, timeout=15) as client:
        response = client.get(url)
        for _ in range(5):
            form = _Form()
            form.feed(response.text if "html" in response.headers.get("content-type", "") else "")
            if form.action is None:
                return response
            data = dict(form.fields)
            if "password" in form.names:
                data.update(username=username or "", password=password or "")
            else:
                data["action"] = "approve"
            response = client.post(str(response.url.join(form.action)), data=data)
        return response


if __name__ == "__main__":
    visit(
        sys.argv[1],
        os.environ.get("MCPAUTH_TEST_USERNAME"),
        os.environ.get("MCPAUTH_TEST_PASSWORD"),
    )
