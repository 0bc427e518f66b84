"""The public shape of ``OAuth``: grouped options, each a small frozen value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from mcpauth import jwt as jose
from mcpauth.client import (
    AuthorizationCodeGrant,
    CallableRedirectHandler,
    ClientCredentials,
    ClientCredentialsGrant,
    IdentityAssertion,
    JWTBearerGrant,
    LoopbackRedirectHandler,
    MemoryStorage,
    OAuth,
    Policy,
    Registration,
)
from tests.client.conftest import _SyncASGI, follow
from tests.client.fakes import FakeServers

URL = "http://127.0.0.1:1/mcp"
DEPRECATED = r"flat keyword arguments .* are deprecated .* credentials=ClientCredentials"
KEY = jose.generate_private_key("ES256")
IDENTITY = IdentityAssertion("https://idp.example/token", "id-token", idp_client_id="idp")


def pick_second(servers: list[str]) -> str:
    return servers[-1]


def clock() -> float:
    return 1234.0


def follow_nowhere(url: str) -> str:
    return url


def handler_shape(handler: object) -> tuple[object, ...]:
    if isinstance(handler, LoopbackRedirectHandler):
        return ("loopback", handler.port, handler.path, handler.open_browser, handler.timeout)
    assert isinstance(handler, CallableRedirectHandler)
    return ("callable", handler.redirect_uri())


@pytest.mark.parametrize(
    ("handler", "shape"),
    [
        (None, ("loopback", 0, "/callback", True, 300.0)),
        (
            LoopbackRedirectHandler(port=8765, path="/cb", open_browser=False),
            ("loopback", 8765, "/cb", False, 300.0),
        ),
        (LoopbackRedirectHandler(timeout=9.0), ("loopback", 0, "/callback", True, 9.0)),
        (
            CallableRedirectHandler("http://localhost:3000/callback", follow_nowhere),
            ("callable", "http://localhost:3000/callback"),
        ),
    ],
)
def test_the_redirect_handler_is_the_one_given_or_a_loopback_listener(
    handler: LoopbackRedirectHandler | CallableRedirectHandler | None, shape: tuple[object, ...]
) -> None:
    assert handler_shape(OAuth(URL, redirect_handler=handler).redirect_handler) == shape


@pytest.mark.parametrize(
    ("grant", "expected"),
    [
        (None, AuthorizationCodeGrant()),
        (ClientCredentialsGrant(scopes=("jobs",)), ClientCredentialsGrant(scopes=("jobs",))),
        (JWTBearerGrant(IDENTITY), JWTBearerGrant(IDENTITY)),
    ],
)
def test_the_grant_is_the_one_given_or_the_authorization_code_grant(
    grant: ClientCredentialsGrant | JWTBearerGrant | None, expected: object
) -> None:
    assert OAuth(URL, grant=grant).flow.config.grant == expected


def test_the_policy_is_the_one_given() -> None:
    policy = Policy(refresh_margin=5, max_attempts=1, select_server=pick_second, clock=clock)
    assert OAuth(URL, policy=policy).flow.config.policy == policy


def test_the_grouped_form_does_not_warn() -> None:
    # pytest turns every warning into an error here (pyproject filterwarnings = error)
    OAuth(
        URL,
        credentials=ClientCredentials("c", "s"),
        registration=Registration("n"),
        storage=MemoryStorage(),
        redirect_handler=LoopbackRedirectHandler(open_browser=False),
        grant=ClientCredentialsGrant(scopes=["a"]),
        policy=Policy(),
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"client_nmae": "typo"}, "unexpected keyword argument 'client_nmae'"),
        ({"client_id": "b"}, "unexpected keyword argument 'client_id'"),
        ({"scopes": ["x"]}, "unexpected keyword argument 'scopes'"),
        ({"clock": clock}, "unexpected keyword argument 'clock'"),
        ({"grant": "client_credentials"}, "takes AuthorizationCodeGrant, .* not str"),
        ({"redirect_handler": follow_nowhere}, "wrap a function in CallableRedirectHandler"),
    ],
)
def test_unknown_arguments_and_options_of_the_wrong_type_are_refused(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        OAuth(URL, **kwargs)


def test_scopes_given_as_one_string_are_refused() -> None:
    with pytest.raises(TypeError, match="not one string"):
        AuthorizationCodeGrant(scopes="files:read files:write")  # type: ignore[arg-type]


def test_credentials_choose_their_method_from_what_is_given() -> None:
    assert ClientCredentials("c").auth_method == "none"
    assert ClientCredentials("c", "s").auth_method == "client_secret_basic"
    assert ClientCredentials("c", private_key=KEY).auth_method == "private_key_jwt"
    assert ClientCredentials("c", "s", "client_secret_post").auth_method == "client_secret_post"


def test_credentials_never_show_their_secret() -> None:
    assert "s3cret" not in repr(ClientCredentials("c", "s3cret"))


Make = Callable[[FakeServers, httpx2.Client], OAuth]


def grouped_form(fake: FakeServers, user: httpx2.Client) -> OAuth:
    return OAuth(
        fake.resource,
        registration=Registration(client_name="Grouped agent"),
        grant=AuthorizationCodeGrant(scopes=("files:read",)),
        redirect_handler=CallableRedirectHandler("http://127.0.0.1:9999/callback", follow(user)),
        policy=Policy(clock=fake.clock),
    )


def run_against_a_fake(make: Make) -> FakeServers:
    """Sign in, use the token, let it expire and use it again; the fake records everything."""
    fake = FakeServers()
    with (
        httpx2.Client(transport=_SyncASGI(fake), base_url=fake.base) as user,
        httpx2.Client(transport=_SyncASGI(fake), auth=make(fake, user)) as client,
    ):
        assert client.post(fake.resource, json={}).status_code == 200
        fake.now += fake.expires_in
        assert client.post(fake.resource, json={}).status_code == 200
    return fake


def test_the_grouped_form_sends_what_its_options_say() -> None:
    fake = run_against_a_fake(grouped_form)
    assert [r["client_name"] for r in fake.registrations] == ["Grouped agent"]
    assert [r["grant_type"] for r in fake.token_requests] == ["authorization_code", "refresh_token"]
    assert fake.authorize_requests[0]["scope"] == "files:read"
    assert fake.authorize_requests[0]["redirect_uri"] == "http://127.0.0.1:9999/callback"
