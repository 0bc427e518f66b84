"""A person at a real headless Chromium, for the tests that prove real MCP clients complete OAuth.

:class:`Person` opens an authorization URL in Debian's Chromium (:func:`tests.chromium.launch`),
signs in and approves (or denies) the consent by filling fields and clicking buttons, and follows
the browser until it lands on the client's redirect URI (the URL's ``redirect_uri``). Elements are
found by field name and role only, so a restyle of the templates does not break it.

Run as a program it is a ``BROWSER`` command for :mod:`webbrowser` (``mcpauth login`` opens the
sign-in page through it)::

    BROWSER="python -m tests.e2e.chromium_opener %s"

It signs in as ``$CHROMIUM_OPENER_USERNAME`` / ``$CHROMIUM_OPENER_PASSWORD``, answers the consent
with ``$CHROMIUM_OPENER_ACTION`` (default ``approve``), keeps the browser open until the client
stops listening on its redirect URI (``listener_closed``), and appends one JSON line per trip (the
pages seen, the URL it landed on, or the error) to ``$CHROMIUM_OPENER_LOG``. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.chromium import executable, launch

TIMEOUT = 30.0  # seconds for any one page to appear


def query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


@dataclass
class Trip:
    """One visit of the person to an authorization URL."""

    url: str
    params: dict[str, str]
    pages: list[str] = field(default_factory=list)  # "login", "consent" in the order seen
    consent_text: str = ""  # what the consent page said, when one was shown
    landed: str = ""  # the URL on the client's redirect URI the browser ended on
    error: str = ""  # what the person saw instead, when the server refused
    console_errors: list[str] = field(default_factory=list)  # "text (url)"
    failed_requests: list[str] = field(default_factory=list)  # "METHOD url"

    def problems(self) -> list[str]:
        """Console errors and failed requests of the authorization server's pages (the
        client's own redirect page is not the server's)."""
        issuer = urlsplit(self.url)._replace(path="", query="").geturl()
        return [
            problem for problem in self.console_errors + self.failed_requests if issuer in problem
        ]

    @property
    def callback(self) -> dict[str, str]:
        return query(self.landed)


def _console(trip: Trip, message: Any) -> None:
    """Keep an error with the URL it is about (a failed load names the resource)."""
    if message.type == "error":
        trip.console_errors.append(f"{message.text} ({message.location.get('url', '')})")


def watch(page: Any, trip: Trip) -> None:
    """Keep the console errors and failed requests of ``page`` in ``trip``."""
    page.on("console", lambda message: _console(trip, message))
    page.on("pageerror", lambda error: trip.console_errors.append(str(error)))
    page.on("requestfailed", lambda r: trip.failed_requests.append(f"{r.method} {r.url}"))


def _text(page: Any) -> str:
    main = page.locator("main")
    text = main.first.inner_text() if main.count() else page.locator("body").inner_text()
    return " ".join(str(text).split())[:800]


class Person:
    """Someone at one Chromium window: one browser context, so the session cookie of the
    authorization server persists from one trip to the next (as in a real browser)."""

    def __init__(
        self, browser: Any, username: str, password: str, timeout: float = TIMEOUT
    ) -> None:
        self.context = browser.new_context()
        self.username = username
        self.password = password
        self.timeout_ms = timeout * 1000
        self.trips: list[Trip] = []
        self.pages_opened = 0
        self.context.on("page", self._count)

    def _count(self, _page: Any) -> None:
        self.pages_opened += 1

    def close(self) -> None:
        self.context.close()

    def authorize(self, url: str, action: str = "approve") -> Trip:
        """Open ``url``, sign in and answer the consent with ``action``, until the browser lands
        on the redirect URI named in ``url``; an error page instead is kept in ``Trip.error``."""
        trip = Trip(url=url, params=query(url))
        self.trips.append(trip)
        page = self.context.new_page()
        page.set_default_timeout(self.timeout_ms)
        watch(page, trip)
        try:
            page.goto(url, wait_until="load")
            return self.answer(page, trip, trip.params["redirect_uri"], action)
        finally:
            page.close()

    def answer(self, page: Any, trip: Trip, redirect_uri: str, action: str = "approve") -> Trip:
        """On ``page``, already at the authorization server (a client's own tab sent it there):
        sign in and answer the consent until the browser is at ``redirect_uri``."""
        for _ in range(4):
            if page.url.startswith(redirect_uri):
                break
            password = page.locator("input[name=password]")
            decision = page.locator(f"button[name=action][value={action}]")
            if password.count():
                trip.pages.append("login")
                form = page.locator("form", has=password)
                form.locator("input[name=username]").fill(self.username)
                password.fill(self.password)
                with page.expect_navigation(wait_until="commit"):
                    form.locator("[type=submit]").first.click()
            elif decision.count():
                trip.pages.append("consent")
                trip.consent_text = _text(page)
                with page.expect_navigation(wait_until="commit"):
                    decision.click()
            else:
                trip.error = _text(page)
                return trip
            page.wait_for_load_state("domcontentloaded")
        if not page.url.startswith(redirect_uri):
            trip.error = f"still on {page.url}: {_text(page)}"
        trip.landed = page.url
        return trip


class PersonThread:
    """A :class:`Person` in a thread of its own (Playwright's sync API belongs to the thread that
    started it), callable from any thread, e.g. ``anyio.to_thread.run_sync(person.authorize, url)``
    from the asynchronous MCP SDK clients."""

    def __init__(self, username: str, password: str) -> None:
        executable()  # here, so that a missing browser fails or skips the test itself
        self._jobs: queue.Queue[tuple[Callable[[Person], Any], Future[Any]] | None] = queue.Queue()
        self._ready: Future[Person] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(username, password), name="chromium", daemon=True
        )
        self._thread.start()
        self.person = self._ready.result(timeout=60)

    def _run(self, username: str, password: str) -> None:
        try:
            with launch() as browser:
                person = Person(browser, username, password)
                self._ready.set_result(person)
                while (job := self._jobs.get()) is not None:
                    work, result = job
                    try:
                        result.set_result(work(person))
                    except BaseException as exc:  # handed to the caller
                        result.set_exception(exc)
                person.close()
        except BaseException as exc:
            if self._ready.done():
                raise
            self._ready.set_exception(exc)  # raised in the thread that started this one

    def call(self, work: Callable[[Person], Any], timeout: float = 120.0) -> Any:
        result: Future[Any] = Future()
        self._jobs.put((work, result))
        return result.result(timeout=timeout)

    def authorize(self, url: str, action: str = "approve") -> Trip:
        trip: Trip = self.call(lambda person: person.authorize(url, action))
        return trip

    @property
    def trips(self) -> list[Trip]:
        return self.person.trips

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)


@contextmanager
def person_in_chromium(username: str, password: str) -> Iterator[PersonThread]:
    person = PersonThread(username, password)
    try:
        yield person
    finally:
        person.close()


# --------------------------------------------------------------------------------------------
# a client's loopback redirect listener (RFC 8252 §7.3), as a native app runs one


class CallbackListener:
    """An HTTP listener on 127.0.0.1 (an ephemeral port) recording every query that arrives at
    ``/callback`` and answering with a short page, as a native client's redirect listener does."""

    def __init__(self) -> None:
        self.received: list[dict[str, str]] = []
        self._arrived = threading.Condition()
        received, arrived = self.received, self._arrived

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if urlsplit(self.path).path != "/callback":
                    self.send_error(404)
                    return
                with arrived:
                    received.append(query(self.path))
                    arrived.notify_all()
                body = b"<!doctype html><title>Signed in</title><p>You can close this window."
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None  # the query carries the code

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.redirect_uri = f"http://127.0.0.1:{self._server.server_address[1]}/callback"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def wait(self, count: int, timeout: float = TIMEOUT) -> dict[str, str]:
        """The ``count``-th callback query (1-based), waiting at most ``timeout`` seconds."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.received) >= count, timeout=timeout):
                raise TimeoutError(f"no callback number {count} within {timeout} s")
            return self.received[count - 1]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


# --------------------------------------------------------------------------------------------
# as a BROWSER command


def listener_closes(redirect_uri: str, timeout: float = 20.0) -> bool:
    """Whether the client stops listening on ``redirect_uri`` within ``timeout`` seconds."""
    parts = urlsplit(redirect_uri)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False


def main(argv: list[str]) -> int:
    [url] = argv
    log = os.environ.get("CHROMIUM_OPENER_LOG")
    started = time.monotonic()
    record: dict[str, Any] = {"url": url, "pid": os.getpid()}
    try:
        with launch() as browser:
            person = Person(
                browser,
                os.environ.get("CHROMIUM_OPENER_USERNAME", ""),
                os.environ.get("CHROMIUM_OPENER_PASSWORD", ""),
            )
            trip = person.authorize(url, os.environ.get("CHROMIUM_OPENER_ACTION", "approve"))
            # a person leaves the browser open: the client must be done without it closing
            if trip.landed:
                record["listener_closed"] = listener_closes(trip.params["redirect_uri"])
            person.close()
        record.update(asdict(trip))
    except Exception as exc:  # reported in the log, the caller's test fails on it
        record["error"] = f"{type(exc).__name__}: {exc}"
    record["seconds"] = round(time.monotonic() - started, 2)
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    return 1 if record.get("error") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
