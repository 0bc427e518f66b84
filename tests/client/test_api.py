"""The public shape of ``OAuth``: grouped options, and the flat keyword arguments of earlier
releases still working for one release with a ``DeprecationWarning``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
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


# (flat keyword arguments, the same in the grouped form)
EQUIVALENT: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "a named dynamic client asking for scopes": (
        {"client_name": "My agent", "scopes": ["files:read"], "offline_access": False},
        {
            "registration": Registration(client_name="My agent"),
            "grant": AuthorizationCodeGrant(scopes=("files:read",), offline_access=False),
        },
    ),
    "a metadata document URL": (
        {"client_metadata_url": "https://app.example/client.json"},
        {"registration": Registration(client_metadata_url="https://app.example/client.json")},
    ),
    "a pre-registered confidential client": (
        {"client_id": "pre", "client_secret": "s3cret", "client_issuer": "https://as.example"},
        {"credentials": ClientCredentials("pre", "s3cret", issuer="https://as.example")},
    ),
    "client_secret_post chosen explicitly": (
        {
            "client_id": "pre",
            "client_secret": "s",
            "token_endpoint_auth_method": "client_secret_post",
        },
        {"credentials": ClientCredentials("pre", "s", auth_method="client_secret_post")},
    ),
    "machine to machine with a private key": (
        {
            "grant": "client_credentials",
            "client_id": "svc",
            "private_key": KEY,
            "signing_alg": "ES256",
            "scopes": ("jobs",),
        },
        {
            "grant": ClientCredentialsGrant(scopes=("jobs",)),
            "credentials": ClientCredentials("svc", private_key=KEY, signing_alg="ES256"),
        },
    ),
    "enterprise-managed, the grant implied by identity": (
        {"identity": IDENTITY, "client_id": "xaa", "client_secret": "x"},
        {"grant": JWTBearerGrant(IDENTITY), "credentials": ClientCredentials("xaa", "x")},
    ),
    "the policy knobs": (
        {"refresh_margin": 5, "max_attempts": 1, "select_server": pick_second, "clock": clock},
        {
            "policy": Policy(
                refresh_margin=5, max_attempts=1, select_server=pick_second, clock=clock
            )
        },
    ),
}


def handler_shape(handler: object) -> tuple[object, ...]:
    if isinstance(handler, LoopbackRedirectHandler):
        return ("loopback", handler.port, handler.path, handler.open_browser, handler.timeout)
    assert isinstance(handler, CallableRedirectHandler)
    return ("callable", handler.redirect_uri())


@pytest.mark.parametrize("case", EQUIVALENT)
def test_the_flat_arguments_warn_and_configure_exactly_what_the_grouped_ones_do(case: str) -> None:
    flat, grouped = EQUIVALENT[case]
    with pytest.warns(DeprecationWarning, match=DEPRECATED):
        old = OAuth(URL, **flat)
    new = OAuth(URL, **grouped)
    assert old.flow.config == new.flow.config
    assert handler_shape(old.redirect_handler) == handler_shape(new.redirect_handler)


def test_the_deprecation_warning_points_at_the_callers_line() -> None:
    with pytest.warns(DeprecationWarning, match=DEPRECATED) as caught:
        OAuth(URL, client_name="x")
    assert caught[0].filename == __file__


@pytest.mark.parametrize(
    ("flat", "handler"),
    [
        ({}, ("loopback", 0, "/callback", True, 300.0)),
        (
            {"redirect_uri": "http://127.0.0.1:8765/cb", "open_browser": False},
            ("loopback", 8765, "/cb", False, 300.0),
        ),
        ({"callback_timeout": 9.0}, ("loopback", 0, "/callback", True, 9.0)),
        (
            {"redirect_uri": "http://localhost:3000/callback", "redirect_handler": follow_nowhere},
            ("callable", "http://localhost:3000/callback"),
        ),
    ],
)
def test_the_flat_redirect_arguments_build_the_same_handlers_as_before(
    flat: dict[str, Any], handler: tuple[object, ...]
) -> None:
    if flat:
        with pytest.warns(DeprecationWarning, match=DEPRECATED):
            auth = OAuth(URL, **flat)
    else:
        auth = OAuth(URL)
    assert handler_shape(auth.redirect_handler) == handler


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
        (
            {"credentials": ClientCredentials("a"), "client_id": "b"},
            "pass credentials= or client_id=, not both",
        ),
        (
            {"grant": AuthorizationCodeGrant(), "scopes": ["x"]},
            "pass grant= or scopes=, not both",
        ),
        ({"policy": Policy(), "clock": clock}, "pass policy= or clock=, not both"),
    ],
)
def test_unknown_or_doubled_arguments_are_refused_like_any_wrong_keyword(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        OAuth(URL, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"grant": "password"}, "unknown grant 'password'"),
        ({"grant": "jwt_bearer"}, "needs identity"),
        ({"redirect_handler": follow_nowhere}, "needs redirect_uri"),
    ],
)
def test_impossible_flat_combinations_fail_when_the_object_is_made(
    kwargs: dict[str, Any], message: str
) -> None:
    with (
        pytest.warns(DeprecationWarning, match=DEPRECATED),
        pytest.raises(ValueError, match=message),
    ):
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


def test_the_old_registration_options_name_still_imports_with_a_warning() -> None:
    from mcpauth.client import registration

    with pytest.warns(DeprecationWarning, match="Registration"):
        assert registration.RegistrationOptions is Registration  # type: ignore[attr-defined]


Make = Callable[[FakeServers, httpx.Client], OAuth]


def flat_form(fake: FakeServers, user: httpx.Client) -> OAuth:
    with pytest.warns(DeprecationWarning, match=DEPRECATED):
        return OAuth(
            fake.resource,
            client_name="Flat agent",
            scopes=["files:read"],
            redirect_uri="http://127.0.0.1:9999/callback",
            redirect_handler=follow(user),
            clock=fake.clock,
        )


def grouped_form(fake: FakeServers, user: httpx.Client) -> OAuth:
    return OAuth(
        fake.resource,
        registration=Registration(client_name="Flat agent"),
        grant=AuthorizationCodeGrant(scopes=("files:read",)),
        redirect_handler=CallableRedirectHandler("http://127.0.0.1:9999/callback", follow(user)),
        policy=Policy(clock=fake.clock),
    )


def run_against_a_fake(make: Make) -> FakeServers:
    """Sign in, use the token, let it expire and use it again; the fake records everything."""
    fake = FakeServers()
    with (
        httpx.Client(transport=_SyncASGI(fake), base_url=fake.base) as user,
        httpx.Client(transport=_SyncASGI(fake), auth=make(fake, user)) as client,
    ):
        assert client.post(fake.resource, json={}).status_code == 200
        fake.now += fake.expires_in
        assert client.post(fake.resource, json={}).status_code == 200
    return fake


def test_both_forms_send_the_same_requests() -> None:
    old, new = run_against_a_fake(flat_form), run_against_a_fake(grouped_form)

    def stable(form: dict[str, str]) -> dict[str, str]:
        random = {"state", "code_challenge", "code", "code_verifier", "refresh_token"}
        return {k: v for k, v in form.items() if k not in random}

    assert old.registrations == new.registrations
    assert old.registrations[0]["client_name"] == "Flat agent"
    assert [stable(r) for r in old.authorize_requests] == [
        stable(r) for r in new.authorize_requests
    ]
    assert [stable(r) for r in old.token_requests] == [stable(r) for r in new.token_requests]
    assert [r["grant_type"] for r in new.token_requests] == ["authorization_code", "refresh_token"]
    assert new.authorize_requests[0]["scope"] == "files:read"
