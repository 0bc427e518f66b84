"""A stand-in for GitHub, not GitHub: a small Starlette app serving the responses GitHub
documents for an OAuth app's web application flow ("Authorizing OAuth apps": the authorization
page, ``POST /login/oauth/access_token`` with its errors answered as HTTP 200 JSON, PKCE S256,
expiring user tokens with rotated refresh tokens as GitHub Apps get them) and the REST API's
``GET /user`` and ``GET /user/emails`` ("REST API endpoints for users" and "for emails",
version 2022-11-28). The tests use it in process (``httpx2.ASGITransport``) and as a process on
127.0.0.1 (``python -m tests.github_standin``) for Chromium.

Paths are served for github.com's two hosts at once (``/login/oauth/...`` and ``/user``) and for
a GitHub Enterprise Server (``/api/v3/user``). The person "signs in" on the authorization page by
choosing an account; ``POST /_standin/api`` with ``{"down": true}`` makes the API answer 503,
``GET /_standin/requests`` tells what it was sent."""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import html
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

DOCS = "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors"

INCORRECT_CLIENT = "The client_id and/or client_secret passed are incorrect."
BAD_CODE = "The code passed is incorrect or expired."
BAD_REFRESH = "The refresh token passed is incorrect or expired."
REDIRECT_MISMATCH = "The redirect_uri MUST match the registered callback URL for this application."

# Accounts: octocat has a verified primary address at example.com; hubot's primary address is
# not verified (a verified one at another domain is not primary); nomail's token may not read
# its addresses (the emails API answers 404, as for a token without user:email).
USERS: dict[str, dict[str, Any]] = {
    "octocat": {
        "user": {"login": "octocat", "id": 583231, "name": "The Octocat",
                 "email": "octocat@github.com", "type": "User", "site_admin": False},
        "emails": [
            {"email": "octocat@example.com", "primary": True, "verified": True,
             "visibility": "private"},
            {"email": "octocat@github.com", "primary": False, "verified": True,
             "visibility": "public"},
        ],
    },
    "hubot": {
        "user": {"login": "hubot", "id": 1000002, "name": None, "email": "hubot@example.com",
                 "type": "User", "site_admin": False},
        "emails": [
            {"email": "hubot@example.com", "primary": True, "verified": False,
             "visibility": "public"},
            {"email": "hubot@other.example", "primary": False, "verified": True,
             "visibility": None},
        ],
    },
    "nomail": {
        "user": {"login": "nomail", "id": 1000003, "name": "No Mail", "email": None,
                 "type": "User", "site_admin": False},
        "emails": None,
    },
}  # fmt: skip


@dataclass
class StandIn:
    """What the stand-in knows and was sent."""

    client_id: str
    client_secret: str
    redirect_uris: tuple[str, ...]
    expiring: bool = False  # tokens with expires_in and a refresh token (GitHub App style)
    expires_in: int = 28800  # GitHub's eight hours
    api_down: bool = False
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # access token -> login
    # refresh token -> (login, the access token issued with it)
    refresh_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)
    authorization_requests: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, Any]] = field(default_factory=list)
    api_requests: list[str] = field(default_factory=list)
    users: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(USERS))

    def issue(self, login: str) -> dict[str, Any]:
        """A token response: an OAuth app's token that does not expire (gho_), or a GitHub
        App's eight-hour user token (ghu_) with a six-month refresh token (ghr_)."""
        access = f"{'ghu' if self.expiring else 'gho'}_{secrets.token_urlsafe(27)}"
        self.tokens[access] = login
        answer: dict[str, Any] = {
            "access_token": access,
            "scope": "read:user,user:email",
            "token_type": "bearer",
        }
        if self.expiring:
            refresh = f"ghr_{secrets.token_urlsafe(54)}"
            self.refresh_tokens[refresh] = (login, access)
            answer.update(
                expires_in=self.expires_in, refresh_token=refresh, refresh_token_expires_in=15897600
            )
        return answer


def _answer(request: Request, body: dict[str, Any]) -> Response:
    """A token endpoint answer: JSON when the request accepts it, else GitHub's default, a
    form-encoded body."""
    if "json" in request.headers.get("accept", ""):
        return JSONResponse(body)
    return Response(urlencode(body), media_type="application/x-www-form-urlencoded")


def _error(request: Request, error: str, description: str) -> Response:
    """GitHub answers a bad token request with HTTP 200 and an error object."""
    return _answer(request, {"error": error, "error_description": description, "error_uri": DOCS})


def app(standin: StandIn) -> Starlette:
    async def authorize(request: Request) -> Response:
        params = dict(request.query_params)
        if request.method == "GET":
            standin.authorization_requests.append(params)
        if params.get("client_id") != standin.client_id:
            return HTMLResponse("<h1>404 Not Found</h1>", 404)
        if params.get("redirect_uri") not in standin.redirect_uris:
            return HTMLResponse("<h1>The redirect_uri is not associated with this app</h1>", 400)
        if request.method == "GET":
            options = "".join(f"<option>{html.escape(login)}</option>" for login in standin.users)
            page = (
                "<!doctype html><html lang=en><title>Authorize application (stand-in)</title>"
                "<main><h1>GitHub stand-in: authorize the application</h1>"
                '<form method="post"><label>Account <select name="login">'
                f"{options}</select></label>"
                '<button name="authorize" value="1">Authorize</button>'
                '<button name="authorize" value="0">Cancel</button></form></main>'
            )
            return HTMLResponse(page)
        form = await request.form()
        back = {"state": params.get("state", "")}
        if form.get("authorize") != "1":
            back = {
                "error": "access_denied",
                "error_description": "The user has denied your application access.",
                "error_uri": DOCS,
                **back,
            }
        else:
            code = secrets.token_hex(10)
            standin.codes[code] = {**params, "login": str(form.get("login"))}
            back = {"code": code, **back}
        return RedirectResponse(f"{params['redirect_uri']}?{urlencode(back)}", 302)

    async def access_token(request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        standin.token_requests.append(
            {**form, "accept": request.headers.get("accept", ""),
             "authorization": "authorization" in request.headers}
        )  # fmt: skip
        if (form.get("client_id"), form.get("client_secret")) != (
            standin.client_id,
            standin.client_secret,
        ):
            return _error(request, "incorrect_client_credentials", INCORRECT_CLIENT)
        if form.get("grant_type") == "refresh_token":
            spent = standin.refresh_tokens.pop(form.get("refresh_token", ""), None)
            if spent is None:
                return _error(request, "bad_refresh_token", BAD_REFRESH)
            login, old_access = spent  # a used refresh token ends its access token too
            standin.tokens.pop(old_access, None)
            return _answer(request, standin.issue(login))
        issued = standin.codes.pop(form.get("code", ""), None)
        if issued is None:
            return _error(
                request, "bad_verification_code", "The code passed is incorrect or expired."
            )
        if form.get("redirect_uri") not in (None, issued["redirect_uri"]):
            return _error(request, "redirect_uri_mismatch", REDIRECT_MISMATCH)
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        if issued.get("code_challenge") and (
            challenge.rstrip(b"=").decode() != issued["code_challenge"]
            or issued.get("code_challenge_method") != "S256"
        ):
            return _error(
                request, "bad_verification_code", "The code passed is incorrect or expired."
            )
        return _answer(request, standin.issue(issued["login"]))

    def _person(request: Request) -> dict[str, Any] | Response:
        standin.api_requests.append(f"{request.method} {request.url.path}")
        if standin.api_down:
            return Response("<h1>Unicorn! This page is taking too long to load.</h1>", 503)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        login = standin.tokens.get(token) if scheme.lower() in ("bearer", "token") else None
        if login is None:
            return JSONResponse(
                {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest",
                 "status": "401"}, 401,
            )  # fmt: skip
        return standin.users[login]

    async def user(request: Request) -> Response:
        person = _person(request)
        return person if isinstance(person, Response) else JSONResponse(person["user"])

    async def emails(request: Request) -> Response:
        person = _person(request)
        if isinstance(person, Response):
            return person
        if person["emails"] is None:
            return JSONResponse({"message": "Not Found", "status": "404"}, 404)
        return JSONResponse(person["emails"])

    async def api_state(request: Request) -> Response:
        standin.api_down = bool((await request.json()).get("down"))
        return JSONResponse({"down": standin.api_down})

    async def requests(request: Request) -> Response:
        return JSONResponse(
            {"authorization": standin.authorization_requests, "api": standin.api_requests,
             "token": [{k: v for k, v in r.items() if k != "client_secret"}
                       for r in standin.token_requests]}
        )  # fmt: skip

    return Starlette(
        routes=[
            Route("/login/oauth/authorize", authorize, methods=["GET", "POST"]),
            Route("/login/oauth/access_token", access_token, methods=["POST"]),
            Route("/user", user),
            Route("/user/emails", emails),
            Route("/api/v3/user", user),
            Route("/api/v3/user/emails", emails),
            Route("/_standin/api", api_state, methods=["POST"]),
            Route("/_standin/requests", requests),
            # GitHub serves one; without it Chromium may log the stand-in's 404 on the pages
            # that follow (it fetches the icon while the account chooser redirects)
            Route("/favicon.ico", lambda request: Response(status_code=204)),
        ]
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--redirect-uri", action="append", required=True)
    args = parser.parse_args()
    standin = StandIn(args.client_id, args.client_secret, tuple(args.redirect_uri))
    uvicorn.run(app(standin), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
