"""The authorization endpoint: exact redirect URI matching with the loopback port rule,
errors that never redirect to an unvalidated URI, PKCE S256 only, RFC 8707 resources, scopes,
RFC 9207 `iss` (docs/security.md T4, T6, T7, T8, T9, T12, T23, T25, T27; AS-21, AS-22, AS-27)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import admin

from ..conftest import ISSUER
from ..oauth import authorization_params, follow, pkce_pair, query, sign_in_and_approve
from .conftest import RESOURCE

pytestmark = pytest.mark.anyio
CHALLENGE = pkce_pair()[1]


@pytest.fixture
def trusted_client(seeded: Starlette) -> dict[str, Any]:
    """An admin-registered client: errors redirect to it automatically."""
    return admin.add_client(
        seeded.state.mcpauth,
        name="Trusted",
        redirect_uris=["https://app.example/cb"],
        auth_method="none",
        grant_types=["authorization_code", "refresh_token"],
    )


def _params(client: str, **changes: str | None) -> dict[str, str]:
    params = authorization_params(client, CHALLENGE, redirect_uri="https://app.example/cb")
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return params


async def _get(
    http: httpx2.AsyncClient, params: dict[str, str] | list[tuple[str, str]]
) -> httpx2.Response:
    return await http.get("/authorize?" + urlencode(params))


UNREDIRECTABLE = [
    ("unknown client", {"client_id": "nope"}),
    ("missing client_id", {"client_id": None}),
    ("missing redirect_uri", {"redirect_uri": None}),
    ("unregistered redirect_uri", {"redirect_uri": "https://evil.example/cb"}),
    ("trailing slash", {"redirect_uri": "https://app.example/cb/"}),
    ("extra query", {"redirect_uri": "https://app.example/cb?x=1"}),
    ("case changed", {"redirect_uri": "https://app.example/CB"}),
    ("suffix host", {"redirect_uri": "https://app.example.evil/cb"}),
    ("fragment", {"redirect_uri": "https://app.example/cb#f"}),
    ("userinfo", {"redirect_uri": "https://user@app.example/cb"}),
    ("percent-encoded path", {"redirect_uri": "https://app.example/%63b"}),
    ("port on a web redirect", {"redirect_uri": "https://app.example:8443/cb"}),
]


@pytest.mark.parametrize(("case", "changes"), UNREDIRECTABLE, ids=[c[0] for c in UNREDIRECTABLE])
@pytest.mark.parametrize(
    "error_trigger",
    [
        {},
        {"response_type": "token"},
        {"scope": "nope"},
        {"code_challenge": None},
        {"code_challenge_method": "plain"},
    ],
    ids=["valid", "implicit", "bad-scope", "no-pkce", "plain-pkce"],
)
async def test_t7_errors_with_an_unvalidated_client_or_redirect_never_redirect(
    http: httpx2.AsyncClient,
    trusted_client: dict[str, Any],
    case: str,
    changes: dict[str, str | None],
    error_trigger: dict[str, str | None],
) -> None:
    response = await _get(
        http, _params(trusted_client["client_id"], **{**error_trigger, **changes})
    )
    assert response.status_code == 400
    assert "location" not in response.headers
    assert response.headers["content-type"].startswith("text/html")


REDIRECTED_ERRORS = [
    ("implicit flow", {"response_type": "token"}, "unsupported_response_type"),
    ("missing response_type", {"response_type": None}, "invalid_request"),
    ("missing PKCE", {"code_challenge": None}, "invalid_request"),
    ("plain PKCE", {"code_challenge_method": "plain"}, "invalid_request"),
    ("PKCE method omitted", {"code_challenge_method": None}, "invalid_request"),
    ("short challenge", {"code_challenge": "a" * 42}, "invalid_request"),
    ("challenge with bad characters", {"code_challenge": "+" * 43}, "invalid_request"),
    ("unknown resource", {"resource": "https://rs2.example/mcp"}, "invalid_target"),
    ("resource with fragment", {"resource": f"{RESOURCE}#x"}, "invalid_target"),
    ("unknown prompt", {"prompt": "select_account"}, "invalid_request"),
]


@pytest.mark.parametrize(
    ("case", "changes", "error"), REDIRECTED_ERRORS, ids=[c[0] for c in REDIRECTED_ERRORS]
)
async def test_t7_t9_errors_redirect_to_a_trusted_client_with_state_and_iss(
    http: httpx2.AsyncClient,
    trusted_client: dict[str, Any],
    case: str,
    changes: dict[str, str | None],
    error: str,
) -> None:
    response = await _get(http, _params(trusted_client["client_id"], **changes))
    assert response.status_code == 303
    location = response.headers["location"]
    assert location.startswith("https://app.example/cb?")
    params = query(location)
    assert params["error"] == error
    assert params["error_description"]
    assert params["state"] == "state-123"
    assert params["iss"] == ISSUER  # RFC 9207: errors carry iss too


async def test_t8_errors_for_a_dynamically_registered_client_show_a_page_before_any_redirect(
    http: httpx2.AsyncClient,
    public_client: dict[str, Any],
) -> None:
    # (an unknown scope used to be the trigger; unknown scopes are now narrowed away)
    params = authorization_params(public_client["client_id"], CHALLENGE, prompt="select_account")
    response = await _get(http, params)
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "invalid_request" in response.text
    assert "http://127.0.0.1:5555/callback?error=invalid_request" in response.text.replace(
        "&amp;", "&"
    )


@pytest.mark.parametrize(
    ("requested", "ok"),
    [
        ("http://127.0.0.1:53111/callback", True),
        ("http://127.0.0.1/callback", True),
        ("http://127.0.0.1:53111/callback2", False),
        ("http://127.0.0.2:53111/callback", False),
        ("https://127.0.0.1:53111/callback", False),
        ("http://localhost:53111/callback", False),
        ("http://[::1]:53111/callback", False),
        ("http://127.0.0.1:53111/callback?x=1", False),
    ],
)
async def test_t6_loopback_redirects_match_on_any_port_and_nothing_else(
    http: httpx2.AsyncClient, public_client: dict[str, Any], requested: str, ok: bool
) -> None:
    response = await _get(
        http, authorization_params(public_client["client_id"], CHALLENGE, redirect_uri=requested)
    )
    assert (response.status_code == 303) is ok
    if ok:
        assert "/interaction/" in response.headers["location"]


async def test_t6_ipv6_loopback_registration_matches_on_any_port(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    from ..oauth import register_public_client

    client = await register_public_client(http, "http://[::1]/cb")
    ok = await _get(
        http,
        authorization_params(client["client_id"], CHALLENGE, redirect_uri="http://[::1]:4000/cb"),
    )
    bad = await _get(
        http,
        authorization_params(client["client_id"], CHALLENGE, redirect_uri="http://[::2]:4000/cb"),
    )
    assert ok.status_code == 303
    assert bad.status_code == 400


@pytest.mark.parametrize("name", ["code_challenge", "state", "scope", "response_type"])
async def test_t27_a_repeated_parameter_is_invalid_request(
    http: httpx2.AsyncClient, trusted_client: dict[str, Any], name: str
) -> None:
    params = list(_params(trusted_client["client_id"], scope="mcp:tools").items())
    params.append((name, dict(params)[name]))
    response = await _get(http, params)
    assert response.status_code == 303
    assert query(response.headers["location"])["error"] == "invalid_request"


@pytest.mark.parametrize("name", ["client_id", "redirect_uri"])
async def test_t27_a_repeated_client_id_or_redirect_uri_is_never_redirected(
    http: httpx2.AsyncClient, trusted_client: dict[str, Any], name: str
) -> None:
    params = list(_params(trusted_client["client_id"]).items())
    params.append((name, "https://evil.example/cb"))
    response = await _get(http, params)
    assert response.status_code == 400
    assert "location" not in response.headers


async def test_two_resources_in_one_request_are_invalid_request(
    http: httpx2.AsyncClient, trusted_client: dict[str, Any]
) -> None:
    # was invalid_target: a repeated parameter is a malformed request, and the description
    # says so plainly (Codex CLI repeats `resource`; the same value twice is accepted)
    params = [
        *_params(trusted_client["client_id"]).items(),
        ("resource", RESOURCE),
        ("resource", "http://127.0.0.1:8001/mcp"),
    ]
    response = await _get(http, params)
    error = query(response.headers["location"])
    assert error["error"] == "invalid_request"
    assert "more than once with different values" in error["error_description"]


async def test_omitted_resource_and_scope_use_the_default_resource_and_its_default_scopes(
    http: httpx2.AsyncClient, public_client: dict[str, Any], seeded: Starlette
) -> None:
    response = await _get(http, authorization_params(public_client["client_id"], CHALLENGE))
    interaction_id = response.headers["location"].rsplit("/", 1)[1]
    with seeded.state.mcpauth.db.read() as session:
        from mcpauth.server.storage.models import Interaction

        stored = session.get(Interaction, interaction_id)
    assert stored is not None
    assert stored.request["resource"] == RESOURCE
    assert stored.request["scopes"] == ["mcp:tools"]


async def test_omitted_resource_without_a_default_is_invalid_target(
    http: httpx2.AsyncClient, app: Starlette
) -> None:
    ctx = app.state.mcpauth
    admin.add_resource(ctx, "https://rs.example/mcp", scopes=["a"])
    client = admin.add_client(
        ctx, name="T", redirect_uris=["https://app.example/cb"], auth_method="none"
    )
    response = await _get(http, _params(client["client_id"]))
    assert query(response.headers["location"])["error"] == "invalid_target"


async def test_resource_is_compared_in_canonical_form(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    params = authorization_params(
        public_client["client_id"], CHALLENGE, resource="HTTP://127.0.0.1:8000/mcp"
    )
    response = await _get(http, params)
    assert "/interaction/" in response.headers["location"]


async def test_t25_authorize_has_no_cors(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    preflight = await http.options(
        "/authorize",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
    )
    response = await http.get(
        "/authorize?" + urlencode(authorization_params(public_client["client_id"], CHALLENGE)),
        headers={"Origin": "https://evil.example"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in response.headers


async def test_t12_every_html_page_forbids_framing_and_caching(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    error = await http.get("/authorize?client_id=nope")
    login = await follow(
        http, await _get(http, authorization_params(public_client["client_id"], CHALLENGE))
    )
    account = await http.get("/account")
    for page in (error, login, account):
        assert page.headers["content-type"].startswith("text/html")
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["referrer-policy"] == "same-origin"


async def test_post_to_the_authorization_endpoint_works_like_get(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    response = await http.post(
        "/authorize", data=authorization_params(public_client["client_id"], CHALLENGE)
    )
    assert response.status_code == 303
    assert "/interaction/" in response.headers["location"]


async def test_state_is_returned_exactly_as_given(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    state = "a b&c=d/é"
    params = authorization_params(public_client["client_id"], CHALLENGE, state=state)
    response = await sign_in_and_approve(http, params)
    assert response.status_code == 303
    assert query(response.headers["location"])["state"] == state


async def test_a_self_registered_clients_scope_does_not_block_a_later_step_up(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    from ..oauth import register_public_client

    client = await register_public_client(http, scope="mcp:tools")
    params = authorization_params(client["client_id"], CHALLENGE, scope="mcp:tools mcp:admin")
    response = await _get(http, params)
    assert response.status_code == 303
    assert "/interaction/" in response.headers["location"]


async def test_an_administrators_scope_list_binds_the_client(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    client = admin.add_client(
        seeded.state.mcpauth,
        name="Bound",
        redirect_uris=["https://app.example/cb"],
        auth_method="none",
        scopes=["mcp:tools"],
    )
    response = await _get(http, _params(client["client_id"], scope="mcp:tools mcp:admin"))
    assert query(response.headers["location"])["error"] == "invalid_scope"
