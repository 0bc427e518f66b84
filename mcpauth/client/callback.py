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
from html import escape
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Protocol, TextIO, runtime_checkable
from urllib.parse import parse_qs, urlsplit

from mcpauth.client.errors import CallbackTimeout, UnsafeURL

DEFAULT_TIMEOUT = 300.0
_STYLE = (
    ":root{color-scheme:light dark}body{font:16px/1.5 system-ui,-apple-system,'Segoe UI',"
    "Roboto,sans-serif;margin:0;padding:2.5rem 1rem;background:#f3f4f6;color:#111827;"
    "display:flex;justify-content:center}main{max-width:28rem;width:100%;background:#fff;"
    "border:1px solid #d1d5db;border-radius:12px;padding:1.75rem}h1{font-size:1.4rem;"
    "margin:0 0 .75rem}.box{border-left:4px solid var(--line);padding:.6rem .8rem}"
    "@media (prefers-color-scheme:dark){body{background:#030712;color:#f9fafb}"
    "main{background:#111827;border-color:#374151}}"
)


def callback_page(query: str) -> bytes:
    """The page the browser shows when it comes back to the terminal: signed in, denied, or
    what went wrong, in the style of the authorization server's pages."""
    params = parse_qs(query)
    error = params.get("error", [""])[0]
    if not error:
        title, text, line = (
            "Signed in",
            "You can close this window and return to the terminal.",
            "#15803d",
        )
    elif error == "access_denied":
        title, text, line = (
            "Access denied",
            "You denied the request, so the application got no access. You can close this window.",
            "#b45309",
        )
    else:
        description = params.get("error_description", [""])[0][:300]
        title = "Sign-in did not complete"
        text = f"The authorization server answered {error[:60]}"
        text += f": {description}" if description else "."
        line = "#b91c1c"
    body = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)} · mcpauth</title><style>{_STYLE}</style></head>"
        f"<body><main><h1>{escape(title)}</h1>"
        f"<p class=box style='--line:{line}' role=status>{escape(text)}</p></main></body></html>"
    )
    return body.encode()


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
        page = callback_page(urlsplit(self.path).query)
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("cache-control", "no-store")
        self.send_header("content-security-policy", "default-src 'none'; style-src 'unsafe-inline'")
        self.send_header("referrer-policy", "no-referrer")
        self.send_header("content-length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

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
