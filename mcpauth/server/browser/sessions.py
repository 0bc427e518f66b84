"""The browser session. The cookie carries only a random session id, signed with a key derived
from the server secret and the issuer (so issuers sharing a secret reject each other's
cookies); a signed-in session lives on the server, in ``browser_sessions``, under the id's
SHA-256 digest, and is looked up, with its account, on every interaction: signing out, removing
the user or ``session_ttl`` ends it, whatever copy of the cookie is still around. Anonymous
sessions (a pending request bound to a browser) have no row. ``__Host-`` prefix and ``Secure``
on https; always ``HttpOnly`` and ``SameSite=Lax``. CSRF tokens are HMACs bound to the session
id and one form's purpose (RFC 9700 §4.7)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.browser.services import BrowserServices
from mcpauth.server.config import Settings
from mcpauth.server.crypto import digest
from mcpauth.server.storage import browser_sessions
from mcpauth.server.storage.database import Database
from mcpauth.server.threads import run_blocking


@dataclass
class BrowserSession:
    sid: str
    user_id: str | None = None
    auth_time: int | None = None
    changed: bool = False
    amr: str = ""  # RFC 8176 methods of the sign-in, space-separated

    @property
    def methods(self) -> list[str]:
        return self.amr.split()

    @classmethod
    def new(cls) -> BrowserSession:
        return cls(sid=secrets.token_urlsafe(32), changed=True)


def cookie_name(settings: Settings) -> str:
    return "__Host-mcpauth" if settings.is_https else "mcpauth_session"


def _serializer(cookie_secret: bytes) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(cookie_secret, salt="mcpauth-session")


def _signed_in(db: Database, now: int, sid: str) -> tuple[str, int, str] | None:
    """The live server-side session of ``sid`` whose account still exists."""
    with db.read() as session:
        return browser_sessions.signed_in(session, digest(sid), now)


async def load_session(ctx: BrowserServices, request: Request) -> BrowserSession:
    """The request's session (signed in only while its server-side record and account live),
    or a fresh anonymous one (to be set on the response)."""
    raw = request.cookies.get(cookie_name(ctx.settings))
    if raw:
        try:
            data = _serializer(ctx.cookie_secret).loads(raw, max_age=ctx.settings.session_ttl)
        except BadSignature:
            data = None
        if isinstance(data, dict) and isinstance(data.get("sid"), str):
            sid = data["sid"]
            found = await run_blocking(_signed_in, ctx.db, ctx.now(), sid)
            if found is None:
                return BrowserSession(sid=sid)
            return BrowserSession(sid=sid, user_id=found[0], auth_time=found[1], amr=found[2])
    return BrowserSession.new()


def sign_in(ctx: BrowserServices, browser: BrowserSession, user_id: str, amr: str = "") -> None:
    """Start a server-side session for ``user_id``, signed in with the methods ``amr``, under a
    new id (no session fixation; a step up to a second factor rotates it too); the browser's
    previous one ends."""
    now = ctx.now()
    old = browser.sid
    browser.sid = secrets.token_urlsafe(32)
    browser.user_id = user_id
    browser.auth_time = now
    browser.amr = amr
    browser.changed = True
    with ctx.db.write() as session:
        browser_sessions.start(
            session,
            digest(browser.sid),
            user_id,
            now,
            now + ctx.settings.session_ttl,
            ending=digest(old),
            amr=amr,
        )


def sign_out(db: Database, browser: BrowserSession) -> None:
    """End the server-side session: no copy of the cookie is signed in any more."""
    with db.write() as session:
        browser_sessions.end(session, digest(browser.sid))
    browser.sid = secrets.token_urlsafe(32)
    browser.user_id = None
    browser.auth_time = None
    browser.amr = ""
    browser.changed = True


def save_session(ctx: BrowserServices, session: BrowserSession, response: Response) -> None:
    if not session.changed:
        return
    response.set_cookie(
        cookie_name(ctx.settings),
        _serializer(ctx.cookie_secret).dumps({"sid": session.sid}),
        max_age=ctx.settings.session_ttl,
        path="/",
        secure=ctx.settings.is_https,
        httponly=True,
        samesite="lax",
    )
