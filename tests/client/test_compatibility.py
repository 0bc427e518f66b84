"""The client helper against authorization servers that depart from MCP
(``Policy(compatibility=ServerCompatibility(...))``), against a fake shaped like Microsoft Entra
ID's v2.0 endpoints: it refuses RFC 8707 ``resource`` (AADSTS901002) and any scope that is not
``<application ID URI>/<scope>`` or an OpenID one, answers with the long scope names, and does
not advertise the S256 it supports. With the compatibility the whole flow works (sign-in,
refresh, step-up with the MCP server's own scope names); without it the helper refuses as MCP
requires. Plus the mapping rules and the command-line flags."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from mcpauth.client import (
    AuthorizationFailed,
    CallableRedirectHandler,
    ClientCredentials,
    IssuerMismatch,
    MemoryStorage,
    OAuth,
    PKCENotSupported,
    Policy,
    ServerCompatibility,
)
from mcpauth.client.cli import _compatibility, add_client_parsers
from tests.client.conftest import _SyncASGI, follow
from tests.client.fakes import FakeServers

APP = "api://11111111-2222-3333-4444-555555555555"
OPENID = {"openid", "profile", "email", "offline_access"}
NOT_SUPPORTED = "AADSTS901002: The 'resource' request parameter is not supported."


@dataclass
class EntraLike(FakeServers):
    """The fake authorization server with Entra ID v2.0's differences."""

    prefix: str = APP + "/"
    refusals: list[str] = field(default_factory=list)

    def metadata(self) -> dict[str, Any]:
        doc = super().metadata()
        del doc["code_challenge_methods_supported"]  # supported, not advertised
        doc["scopes_supported"] = sorted(OPENID)
        return doc

    def _bad_scopes(self, scope: str) -> list[str]:
        return [s for s in scope.split() if s not in OPENID and not s.startswith(self.prefix)]

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        error = None
        if "resource" in query:
            error = {"error": "invalid_request", "error_description": NOT_SUPPORTED}
        elif self._bad_scopes(query.get("scope", "")):
            error = {"error": "invalid_scope", "error_description": "AADSTS70011"}
        if error is not None:
            self.refusals.append(error["error"])
            back = {**error, "state": query["state"]}
            return RedirectResponse(f"{query['redirect_uri']}?{urlencode(back)}", 302)
        return await super().authorize(request)

    async def token(self, request: Request) -> Response:
        form = await request.form()
        if "resource" in form or self._bad_scopes(str(form.get("scope", ""))):
            self.refusals.append("token")
            return JSONResponse(
                {"error": "invalid_request", "error_description": NOT_SUPPORTED}, 400
            )
        return await super().token(request)

    def issue(self, client_id: str, scope: str | None, jkt: str | None = None) -> dict[str, Any]:
        """The answer names the long scopes; the access token (what the MCP server checks)
        carries the API's own short ones, as Entra's ``scp`` does."""
        answered = " ".join(s for s in (scope or "").split() if s != "offline_access")
        body = super().issue(client_id, answered or None, jkt)
        issued = self.tokens[body["access_token"]]
        issued.scopes = {s.removeprefix(self.prefix) for s in issued.scopes}
        return body


@pytest.fixture
def entra() -> EntraLike:
    fake = EntraLike(registration=False, expires_in=600)
    fake.challenge_scope = "mcp:tools"
    fake.required_scopes = {"mcp:tools"}
    return fake


@pytest.fixture
def user(entra: EntraLike) -> Iterator[httpx2.Client]:
    with httpx2.Client(transport=_SyncASGI(entra), base_url=entra.base) as client:
        yield client


def client(entra: EntraLike, user: httpx2.Client, **policy: Any) -> httpx2.Client:
    auth = OAuth(
        entra.resource,
        credentials=ClientCredentials("mcp-client", "s3cret"),
        storage=MemoryStorage(),
        redirect_handler=CallableRedirectHandler("http://127.0.0.1:9999/callback", follow(user)),
        policy=Policy(clock=entra.clock, **policy),
    )
    return httpx2.Client(transport=_SyncASGI(entra), base_url=entra.base, auth=auth)


def test_without_compatibility_the_helper_refuses_as_mcp_requires(
    entra: EntraLike, user: httpx2.Client
) -> None:
    with client(entra, user) as http, pytest.raises(PKCENotSupported):
        http.post(entra.resource, json={})
    assert entra.authorize_requests == []


def test_entra_id_sign_in_refresh_and_step_up_work_with_its_compatibility(
    entra: EntraLike, user: httpx2.Client
) -> None:
    with client(entra, user, compatibility=ServerCompatibility.entra_id(APP)) as http:
        first = http.post(entra.resource, json={})
        assert first.status_code == 200, first.text
        (asked,) = entra.authorize_requests
        assert "resource" not in asked
        assert asked["scope"] == f"{APP}/mcp:tools offline_access"
        assert asked["code_challenge_method"] == "S256"  # assumed, used
        redeemed = entra.token_requests[-1]
        assert redeemed["grant_type"] == "authorization_code"
        assert "resource" not in redeemed
        entra.now += 600  # expired: refreshed without a browser, and without resource
        again = http.post(entra.resource, json={})
        assert again.status_code == 200, again.text
        assert entra.token_requests[-1]["grant_type"] == "refresh_token"
        assert "resource" not in entra.token_requests[-1]
        assert len(entra.authorize_requests) == 1
        # step-up: the MCP server asks for mcp:admin too; the token's scope, answered in long
        # names, was read back as MCP names, so the union is asked for once, in long names
        entra.required_scopes = {"mcp:tools", "mcp:admin"}
        entra.challenge_scope = "mcp:tools mcp:admin"
        stepped = http.post(entra.resource, json={})
        assert stepped.status_code == 200, stepped.text
        # the token's scope, as the server answered it, is kept in the MCP server's names
        assert isinstance(http.auth, OAuth)
        tokens = http.auth.flow.tokens
        assert tokens is not None
        assert tokens.scope == "mcp:tools mcp:admin"
    assert entra.authorize_requests[-1]["scope"] == (
        f"{APP}/mcp:tools {APP}/mcp:admin offline_access"
    )
    assert len(entra.authorize_requests) == 2
    assert entra.refusals == []


def test_compatibility_for_another_authorization_server_sends_nothing(
    entra: EntraLike, user: httpx2.Client
) -> None:
    """A policy meant for one tenant, met by another server: refused before any request, so
    no token meant for that tenant's API is asked for on another MCP server's behalf."""
    elsewhere = ServerCompatibility.entra_id(APP, issuer="https://login.example.com/t-2/v2.0")
    with (
        client(entra, user, compatibility=elsewhere) as http,
        pytest.raises(IssuerMismatch, match="not for"),
    ):
        http.post(entra.resource, json={})
    assert entra.authorize_requests == []
    assert entra.token_requests == []
    here = ServerCompatibility.entra_id(APP, issuer=entra.base)
    with client(entra, user, compatibility=here) as http:
        assert http.post(entra.resource, json={}).status_code == 200


def test_a_server_that_refuses_resource_refuses_the_mcp_default(
    entra: EntraLike, user: httpx2.Client
) -> None:
    """What the compatibility is for: only PKCE assumed, resource still sent → refused."""
    partial = ServerCompatibility(scope_prefix=APP + "/", assume_pkce_s256=True)
    with (
        client(entra, user, compatibility=partial) as http,
        pytest.raises(AuthorizationFailed, match="invalid_request"),
    ):
        http.post(entra.resource, json={})
    assert entra.refusals == ["invalid_request"]


def test_the_mapping_rules() -> None:
    same = ServerCompatibility()
    assert same.resource_for("https://mcp.example.com/mcp") == "https://mcp.example.com/mcp"
    assert same.scope_out("a b") == "a b"
    assert same.token_form({"resource": "r", "scope": "a"}) == {"resource": "r", "scope": "a"}
    renamed = ServerCompatibility(
        resource="urn:example:api",
        scope_map={"mcp:tools": "tools.read tools.call", "mcp:debug": ""},
        scope_prefix="https://api.example/",
    )
    assert renamed.resource_for("https://mcp.example.com/mcp") == "urn:example:api"
    assert renamed.scope_out("openid mcp:tools mcp:debug notes offline_access") == (
        "openid tools.read tools.call https://api.example/notes offline_access"
    )
    assert renamed.scope_out("mcp:debug") is None
    assert (
        renamed.scope_in("https://api.example/notes tools.read openid") == "notes tools.read openid"
    )
    assert renamed.token_form({"grant_type": "x", "resource": "r", "scope": "mcp:debug"}) == {
        "grant_type": "x",
        "resource": "urn:example:api",
    }
    one = ServerCompatibility(scope_map={"mcp:tools": "Tools.ReadWrite"})
    assert one.scope_in("Tools.ReadWrite") == "mcp:tools"
    omitted = ServerCompatibility(send_resource=False)
    assert omitted.token_form({"resource": "r", "grant_type": "refresh_token"}) == {
        "grant_type": "refresh_token"
    }


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"send_resource": False, "resource": "urn:x"}, "not both"),
        ({"scope_map": {"a b": "c"}}, "a scope_map key is one scope"),
        ({"scope_map": {"a": 'b"c'}}, "scope_map"),
        ({"scope_prefix": "api://x/ y"}, "scope_prefix"),
    ],
)
def test_impossible_compatibilities_are_refused(options: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        ServerCompatibility(**options)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_client_parsers(parser.add_subparsers())
    return parser.parse_args(["login", "https://mcp.example.com/mcp", *argv])


def test_the_command_line_flags() -> None:
    assert _compatibility(_args("--entra-id", APP)) == ServerCompatibility.entra_id(APP)
    made = _compatibility(
        _args("--no-resource", "--map-scope", "mcp:tools=Tools.Call", "--assume-pkce-s256")
    )
    assert made.resource_for("https://mcp.example.com/mcp") is None
    assert made.scope_out("mcp:tools") == "Tools.Call"
    assert made.assume_pkce_s256
    assert _compatibility(_args()) == ServerCompatibility()
    with pytest.raises(SystemExit, match="MCP=SERVER"):
        _compatibility(_args("--map-scope", "no-equals-sign"))
    with pytest.raises(SystemExit, match="not both"):
        _compatibility(_args("--no-resource", "--resource", "urn:x"))
