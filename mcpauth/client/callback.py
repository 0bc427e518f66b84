"""Getting the user through the authorization endpoint and back (RFC 8252 §7.3, MCP CL-20/24).

A redirect handler knows its redirect URI and, given an authorization URL, returns the URL the
authorization server redirected back to. :class:`LoopbackRedirectHandler` listens on 127.0.0.1
(an ephemeral or fixed port) and opens the browser; tests pass any callable instead.
"""

from __future__ import annotations

import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Protocol, TextIO, runtime_checkable
from urllib.parse import urlsplit

from mcpauth.client.errors import CallbackTimeout, UnsafeURL

DEFAULT_TIMEOUT = 300.0
_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>mcpauth</title>"
    b"<p>Authorization finished. You can close this window and return to the terminal.</p>"
)


@runtime_checkable
class RedirectHandler(Protocol):
    """Takes the user to the authorization endpoint and brings back the redirect."""

    def redirect_uri(self) -> str:
        """The redirect URI to register and send (a listener may be bound now)."""
        ...

    def authorize(self, authorization_url: str) -> str:
        """Send the user to ``authorization_url`` and return the full callback URL.

        Raises:
            CallbackTimeout: no redirect arrived within the handler's limit.
        """
        ...

    def cancel(self) -> None:
        """Stop waiting (called from another thread on cancellation)."""
        ...


def check_browser_url(url: str) -> str:
    """Only http and https URLs are opened or followed (CL-24: never ``javascript:``, ``file:``).

    Raises:
        UnsafeURL: any other scheme.
    """
    if urlsplit(url).scheme not in ("http", "https"):
        raise UnsafeURL(f"refusing to open {url[:40]!r}: only http and https URLs are allowed")
    return url


class CallableRedirectHandler:
    """A fixed redirect URI and a function from authorization URL to callback URL (for tests)."""

    def __init__(self, redirect_uri: str, follow: Callable[[str], str]) -> None:
        self._redirect_uri = redirect_uri
        self._follow = follow

    def redirect_uri(self) -> str:
        return self._redirect_uri

    def authorize(self, authorization_url: str) -> str:
        return self._follow(check_browser_url(authorization_url))

    def cancel(self) -> None:
        return None


class _CallbackServer(HTTPServer):
    callback: str | None = None
    path: str = "/callback"


class _CallbackRequest(BaseHTTPRequestHandler):
    server: _CallbackServer

    def do_GET(self) -> None:
        if urlsplit(self.path).path != self.server.path:
            self.send_error(404)
            return
        self.server.callback = self.path
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("cache-control", "no-store")
        self.send_header("content-length", str(len(_PAGE)))
        self.end_headers()
        self.wfile.write(_PAGE)

    def log_message(self, format: str, *args: object) -> None:
        return None  # the query carries the code: never log it


class LoopbackRedirectHandler:
    """A one-shot HTTP listener on 127.0.0.1 plus the system browser (or a printed URL)."""

    def __init__(
        self,
        *,
        port: int = 0,
        path: str = "/callback",
        open_browser: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        out: TextIO | None = None,
    ) -> None:
        self.port = port
        self.path = path
        self.open_browser = open_browser
        self.timeout = timeout
        self.out = out
        self._server: _CallbackServer | None = None
        self._cancelled = threading.Event()

    def redirect_uri(self) -> str:
        server = self._bind()
        return f"http://127.0.0.1:{server.server_address[1]}{self.path}"

    def _bind(self) -> _CallbackServer:
        if self._server is None:
            server = _CallbackServer(("127.0.0.1", self.port), _CallbackRequest)
            server.path = self.path
            server.timeout = 0.2  # poll interval for the bounded wait below
            self.port = server.server_address[1]  # keep the port for later step-ups
            self._server = server
        return self._server

    def authorize(self, authorization_url: str) -> str:
        check_browser_url(authorization_url)
        server = self._bind()
        self._cancelled.clear()
        try:
            self._show(authorization_url)
            deadline = time.monotonic() + self.timeout
            while server.callback is None:
                if self._cancelled.is_set() or time.monotonic() >= deadline:
                    raise CallbackTimeout()
                server.handle_request()
            return f"http://127.0.0.1:{server.server_address[1]}{server.callback}"
        finally:
            self.close()

    def _show(self, url: str) -> None:
        out = self.out or sys.stderr
        print(f"Open this URL in a browser to sign in:\n\n    {url}\n", file=out, flush=True)
        if self.open_browser:
            # webbrowser may wait for the browser process; the listener must keep serving meanwhile
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()

    def cancel(self) -> None:
        self._cancelled.set()

    def close(self) -> None:
        if self._server is not None:
            self._server.server_close()
            self._server = None
