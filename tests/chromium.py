"""A real headless Chromium for the tests: Debian's ``chromium`` package driven by Playwright's
Python package (``executable_path``; browser downloads are never used). Tests that need it use
:func:`launch`; when no Chromium is installed they fail, unless ``MCPAUTH_SKIP_BROWSER=1`` says
this machine cannot have one (CI installs it, see ``.ci/run``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

# Without the background-networking switches Chromium keeps calling Google's hosts, which a
# closed network refuses; --no-sandbox because CI runs as root.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
]


def executable() -> str:
    """The Chromium binary (``MCPAUTH_CHROMIUM`` or Debian's), or the test is failed/skipped."""
    path = os.environ.get("MCPAUTH_CHROMIUM") or shutil.which("chromium") or ""
    if not path:
        if os.environ.get("MCPAUTH_SKIP_BROWSER") == "1":
            pytest.skip("no Chromium on this machine (MCPAUTH_SKIP_BROWSER=1)")
        pytest.fail("Chromium is not installed: apt-get install chromium (see .ci/run)")
    return path


@contextmanager
def launch(**options: Any) -> Iterator[Any]:
    """A headless Chromium (Playwright ``Browser``), closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable(), headless=True, args=ARGS, **options
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class PageProblems:
    """Console errors and failed requests seen by a page: a page people use has none."""

    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    def watch(self, page: Any) -> None:
        page.on(
            "console",
            lambda message: message.type == "error" and self.console_errors.append(message.text),
        )
        page.on("pageerror", lambda error: self.console_errors.append(str(error)))
        page.on(
            "requestfailed",
            lambda request: self.failed_requests.append(f"{request.method} {request.url}"),
        )

    def expect_status(self, status: int) -> None:
        """The page just loaded answered ``status`` on purpose (an error page): Chromium's own
        log line for it is not a problem."""
        line = f"the server responded with a status of {status}"
        self.console_errors[:] = [e for e in self.console_errors if line not in e]

    def assert_none(self) -> None:
        assert self.console_errors == [], self.console_errors
        assert self.failed_requests == [], self.failed_requests
