"""The loopback redirect listener and browser hand-off (RFC 8252 §7.3, CL-20, CL-24)."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

import httpx2
import pytest

from mcpauth.client import callback as callback_module
from mcpauth.client.callback import (
    CallableRedirectHandler,
    LoopbackRedirectHandler,
    check_browser_url,
)
from mcpauth.client.errors import CallbackTimeout, UnsafeURL


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Replace the system browser with one that follows the URL back to the listener."""
    urls: list[str] = []

    def browser(url: str) -> bool:
        urls.append(url)
        target = url.split("#", 1)[1]  # tests put the redirect target after '#'
        httpx2.get(f"http://127.0.0.1:{browser.port}/favicon.ico")  # type: ignore[attr-defined]
        httpx2.get(target)
        return True

    browser.port = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(callback_module.webbrowser, "open", browser)
    return urls


def test_cl20_the_redirect_uri_is_http_on_127_0_0_1_with_an_ephemeral_port() -> None:
    handler = LoopbackRedirectHandler(open_browser=False)
    try:
        uri = handler.redirect_uri()
        assert uri.startswith("http://127.0.0.1:")
        assert uri.endswith("/callback")
        assert int(uri.split(":")[2].split("/")[0]) > 0
    finally:
        handler.close()


def test_the_listener_returns_the_full_callback_url(opened: list[str]) -> None:
    handler = LoopbackRedirectHandler(timeout=10, out=io.StringIO())
    uri = handler.redirect_uri()
    opened_browser = callback_module.webbrowser.open
    opened_browser.port = handler.port  # type: ignore[attr-defined]
    result = handler.authorize(f"https://as.example/authorize#{uri}?code=abc&state=xyz")
    assert result == f"{uri}?code=abc&state=xyz"
    assert opened == [f"https://as.example/authorize#{uri}?code=abc&state=xyz"]


def test_a_fixed_port_is_kept_for_later_authorizations(opened: list[str]) -> None:
    first = LoopbackRedirectHandler(open_browser=False)
    port = int(first.redirect_uri().split(":")[2].split("/")[0])
    first.close()
    handler = LoopbackRedirectHandler(port=port, timeout=10, out=io.StringIO())
    assert handler.redirect_uri() == f"http://127.0.0.1:{port}/callback"
    callback_module.webbrowser.open.port = port  # type: ignore[attr-defined]
    handler.authorize(f"https://as.example/a#http://127.0.0.1:{port}/callback?code=1&state=s")
    assert handler.redirect_uri() == f"http://127.0.0.1:{port}/callback"  # rebinds the same port
    handler.close()


def test_without_a_browser_the_url_is_printed_and_the_wait_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(callback_module.webbrowser, "open", pytest.fail)
    out = io.StringIO()
    handler = LoopbackRedirectHandler(open_browser=False, timeout=0.3, out=out)
    handler.redirect_uri()
    with pytest.raises(CallbackTimeout):
        handler.authorize("https://as.example/authorize?x=1")
    assert "https://as.example/authorize?x=1" in out.getvalue()


def test_cancel_stops_the_wait_from_another_thread() -> None:
    handler = LoopbackRedirectHandler(open_browser=False, timeout=60, out=io.StringIO())
    handler.redirect_uri()
    timer = threading.Timer(0.1, handler.cancel)
    timer.start()
    try:
        with pytest.raises(CallbackTimeout):
            handler.authorize("https://as.example/authorize")
    finally:
        timer.cancel()


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "data:text/html,<script>",
        "file:///etc/passwd",
        "vbscript:x",
        "ms-settings:",
    ],
)
def test_cl24_only_http_and_https_urls_are_opened(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(callback_module.webbrowser, "open", pytest.fail)
    with pytest.raises(UnsafeURL):
        check_browser_url(url)
    with pytest.raises(UnsafeURL):
        LoopbackRedirectHandler().authorize(url)
    with pytest.raises(UnsafeURL):
        CallableRedirectHandler("http://127.0.0.1/cb", pytest.fail).authorize(url)


def test_the_listener_answers_other_paths_with_404_and_keeps_waiting(opened: list[str]) -> None:
    handler = LoopbackRedirectHandler(timeout=10, out=io.StringIO())
    uri = handler.redirect_uri()
    callback_module.webbrowser.open.port = handler.port  # type: ignore[attr-defined]
    assert handler.authorize(f"https://as.example/#{uri}?code=c&state=s").endswith("code=c&state=s")
