"""The browser session: a signed cookie holding a random session id and, once signed in, the
user id and sign-in time. ``__Host-`` prefix and ``Secure`` on https; always ``HttpOnly`` and
``SameSite=Lax``. CSRF tokens are HMACs bound to the session id and to one form's purpose
(RFC 9700 §4.7; attacks.md row 10)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server import csrf
from mcpauth.server.context import ServerContext


@dataclass
class BrowserSession:
    sid: str
    user_id: str | None = None
    auth_time: int | None = None
    changed: bool = False

    @classmethod
    def new(cls) -> BrowserSession:
        return cls(sid=secrets.token_urlsafe(32), changed=True)

    def sign_in(self, user_id: str, now: int) -> None:
        """Bind the user and rotate the session id (no session fixation)."""
        self.sid = secrets.token_urlsafe(32)
        self.user_id = user_id
        self.auth_time = now
        self.changed = True

    def sign_out(self) -> None:
        self.sid = secrets.token_urlsafe(32)
        self.user_id = None
        self.auth_time = None
        self.changed = True


def cookie_name(ctx: ServerContext) -> str:
    return "__Host-mcpauth" if ctx.settings.is_https else "mcpauth_session"


def _serializer(ctx: ServerContext) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(ctx.cookie_secret, salt="mcpauth-session")


def load_session(ctx: ServerContext, request: Request) -> BrowserSession:
    """The request's session, or a fresh anonymous one (to be set on the response)."""
    raw = request.cookies.get(cookie_name(ctx))
    if raw:
        try:
            data = _serializer(ctx).loads(raw, max_age=ctx.settings.session_ttl)
        except BadSignature:
            data = None
        if isinstance(data, dict) and isinstance(data.get("sid"), str):
            user_id = data.get("uid")
            auth_time = data.get("at")
            return BrowserSession(
                sid=data["sid"],
                user_id=user_id if isinstance(user_id, str) else None,
                auth_time=auth_time if isinstance(auth_time, int) else None,
            )
    return BrowserSession.new()


def save_session(ctx: ServerContext, session: BrowserSession, response: Response) -> None:
    if not session.changed:
        return
    payload = {"sid": session.sid, "uid": session.user_id, "at": session.auth_time}
    response.set_cookie(
        cookie_name(ctx),
        _serializer(ctx).dumps(payload),
        max_age=ctx.settings.session_ttl,
        path="/",
        secure=ctx.settings.is_https,
        httponly=True,
        samesite="lax",
    )


def csrf_token(ctx: ServerContext, session: BrowserSession, purpose: str) -> str:
    return csrf.csrf_token(ctx.cookie_secret, session.sid, purpose)


def csrf_valid(
    ctx: ServerContext, session: BrowserSession, purpose: str, token: str | None
) -> bool:
    return csrf.csrf_valid(ctx.cookie_secret, session.sid, purpose, token)
