"""The browser suite's parts: a real `mcpauth serve` process on a fresh SQLite file (seeded with
users, a resource and an admin-registered client through the admin commands), a loopback
"application" that receives the authorization response, and Debian's Chromium driven by
Playwright. Screenshots go to results/screenshots/ (CI keeps results/)."""

from __future__ import annotations

import base64
import hashlib
import html
import queue
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest

from ..chromium import PageProblems, launch
from ..support import MCPAUTH, ensure_npm_peers, free_port, run_cli, running

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "results" / "screenshots"
AXE = ROOT / ".npm-peers" / "node_modules" / "axe-core" / "axe.min.js"
PASSWORD = "correct horse battery staple"
RESOURCE = "http://127.0.0.1:8123/mcp"
SCOPES = ("mcp:tools=Call the tools", "mcp:admin=Use the administrative tools")
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")
MAX_FAILURES = 3
WIDTHS = {"desktop": 1280, "phone": 390}


@dataclass
class Callback:
    """The application's loopback redirect URI and the responses it received, in order."""

    url: str
    received: queue.Queue[dict[str, str]] = field(default_factory=queue.Queue)

    def wait(self, timeout: float = 15.0) -> dict[str, str]:
        """The next authorization response the application received."""
        try:
            return self.received.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("the application received no authorization response") from None


def _callback_server(callback: Callback) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            params = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
            body = b"<!doctype html><html lang=en><title>Done</title><main><h1>Done</h1></main>"
            if urlsplit(self.path).path == "/attacker":  # another site posting to the server
                body = (
                    "<!doctype html><html lang=en><title>Win a prize</title><main>"
                    f'<form method="post" action="{html.escape(params["action"])}">'
                    f'<input type="hidden" name="csrf_token" value="{html.escape(params["csrf"])}">'
                    '<input type="hidden" name="username" value="judy">'
                    f'<input type="hidden" name="password" value="{PASSWORD}">'
                    "<button>Claim</button></form></main>"
                ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if urlsplit(self.path).path == "/callback":
                callback.received.put(params)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    port = int(urlsplit(callback.url).port or 0)
    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


@dataclass
class Server:
    issuer: str
    env: dict[str, str]
    callback: Callback
    admin_client_id: str

    def register(self, name: str = "Inspector (test)") -> str:
        """A public client registered by dynamic registration, redirecting to the callback."""
        response = httpx2.post(
            f"{self.issuer}/register",
            json={
                "client_name": name,
                "redirect_uris": [self.callback.url],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
            },
        )
        assert response.status_code == 201, response.text
        return str(response.json()["client_id"])

    def authorize_url(
        self, client_id: str, scope: str = "mcp:tools", resource: str = RESOURCE
    ) -> tuple[str, str, str]:
        """The authorization URL, its PKCE verifier and its state."""
        verifier = secrets.token_urlsafe(48)
        challenge = (
            base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
            .rstrip(b"=")
            .decode()
        )
        state = secrets.token_urlsafe(12)
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": self.callback.url,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": resource,
            "scope": scope,
            "state": state,
        }
        return f"{self.issuer}/authorize?{urlencode(params)}", verifier, state

    def exchange(
        self, client_id: str, code: str, verifier: str, resource: str = RESOURCE
    ) -> dict[str, Any]:
        response = httpx2.post(
            f"{self.issuer}/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": self.callback.url,
                "client_id": client_id,
                "code_verifier": verifier,
                "resource": resource,
            },
        )
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`mcpauth serve` on a fresh SQLite file, seeded with the admin commands."""
    folder = tmp_path_factory.mktemp("browser-server")
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    env = {
        "MCPAUTH_DATABASE_URL": f"sqlite:///{folder / 'mcpauth.db'}",
        "MCPAUTH_SECRET_KEY": "browser-suite-secret-0123456789abcdef",
        "MCPAUTH_ISSUER": issuer,
        "MCPAUTH_LOGIN_MAX_FAILURES": str(MAX_FAILURES),
        "MCPAUTH_LOGIN_LOCKOUT_SECONDS": "300",
        "MCPAUTH_SERVICE_NAME": "Example Corp sign-in",
    }
    for user in USERS:
        assert (
            run_cli(["users", "add", user, "--password-stdin"], env=env, stdin=PASSWORD).returncode
            == 0
        )
    resource = ["resources", "add", RESOURCE, "--name", "Example files", "--default"]
    for scope in SCOPES:
        resource += ["--scope", scope]
    assert run_cli([*resource, "--default-scope", "mcp:tools"], env=env).returncode == 0
    callback = Callback(f"http://127.0.0.1:{free_port()}/callback")
    made = run_cli(
        ["clients", "add", "--name", "Example Desktop", "--redirect-uri", callback.url], env=env
    )
    assert made.returncode == 0, made.stderr
    import json

    admin_client_id = json.loads(made.stdout)["client_id"]
    receiver = _callback_server(callback)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        with running(
            [MCPAUTH, "serve", "--port", str(port)],
            ready_url=f"{issuer}/health",
            env=env,
            cwd=folder,
        ):
            yield Server(issuer, env, callback, admin_client_id)
    finally:
        receiver.shutdown()
        receiver.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per test module. Not per session: Playwright's sync API keeps an event loop
    running in this thread while it lives, which the other suites' async tests cannot share."""
    with launch() as chromium:
        yield chromium


@dataclass
class Visit:
    """A page in a fresh browser context (its own cookies), watched for problems."""

    page: Any
    problems: PageProblems

    def shoot(self, name: str) -> None:
        """Screenshots of the current page at desktop and phone width; the phone width must not
        scroll sideways."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        size = self.page.viewport_size
        for label, width in WIDTHS.items():
            self.page.set_viewport_size({"width": width, "height": 900})
            scroll = self.page.evaluate("document.documentElement.scrollWidth")
            assert scroll <= width, f"{name} scrolls sideways at {width} px ({scroll} px wide)"
            self.page.screenshot(path=str(SCREENSHOTS / f"{name}-{label}.png"), full_page=True)
        self.page.set_viewport_size(size)

    def audit(self) -> list[dict[str, Any]]:
        """axe-core's serious and critical violations (WCAG 2.x A and AA, best practices)."""
        assert AXE.exists(), "axe-core is missing: run scripts/ensure-npm-peers.sh"
        # evaluated through the DevTools protocol, which the pages' CSP (no script) does not
        # govern: the pages are audited exactly as served
        self.page.evaluate(AXE.read_text() + "\n;0")
        result = self.page.evaluate(
            """async () => (await axe.run(document, {runOnly: {type: 'tag', values:
               ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice']}}))
               .violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
               .map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.html)}))"""
        )
        return list(result)

    def check(self, name: str) -> None:
        """Audit (light and dark), screenshot, and no console errors or failed requests."""
        for scheme in ("light", "dark"):
            self.page.emulate_media(color_scheme=scheme)
            violations = self.audit()
            assert violations == [], f"{name} ({scheme}): {violations}"
        self.page.emulate_media(color_scheme="light")
        self.shoot(name)
        self.problems.assert_none()


@pytest.fixture
def visit(browser: Any) -> Iterator[Any]:
    """Open fresh browser contexts: ``visit()`` → :class:`Visit` (``javascript=False`` turns
    scripts off)."""
    contexts: list[Any] = []

    def open_visit(*, javascript: bool = True, width: int = 1280) -> Visit:
        context = browser.new_context(
            java_script_enabled=javascript,
            viewport={"width": width, "height": 900},
        )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        problems = PageProblems()
        problems.watch(page)
        return Visit(page, problems)

    yield open_visit
    for context in contexts:
        context.close()


@pytest.fixture(scope="session", autouse=True)
def _npm_peers() -> None:
    """axe-core (and Node) from npm, pinned: scripts/ensure-npm-peers.sh."""
    ensure_npm_peers()
