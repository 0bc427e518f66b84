"""Client authentication at the token endpoint and machine-to-machine grants (CL-X1, CL-X2)."""

from __future__ import annotations

import base64
import json

import httpx2
import jwt as pyjwt
import pytest

from mcpauth import jwt as jose
from mcpauth.client.credentials import ClientCredentials, authenticate
from mcpauth.client.enterprise import ID_JAG_TYPE, IdentityAssertion, exchange_for_id_jag
from mcpauth.client.errors import RegistrationError, TokenRequestFailed
from mcpauth.client.flow import HTTPRequest, HTTPResponse
from mcpauth.client.options import ClientCredentialsGrant, JWTBearerGrant
from mcpauth.oauth import CLIENT_ASSERTION_TYPE, basic_authorization
from tests.client.conftest import Driver, _SyncASGI, fake_driver, make_flow
from tests.client.fakes import FakeServers

AUDIENCE = "https://as.example"


def test_client_secret_basic_form_encodes_both_parts() -> None:
    header = basic_authorization("id:1", "p@ss word/")
    raw = base64.b64decode(header.removeprefix("Basic ")).decode()
    assert raw == "id%3A1:p%40ss%20word%2F"  # RFC 6749 §2.3.1


def test_client_secret_post_puts_the_secret_in_the_body() -> None:
    form: dict[str, str] = {}
    headers = authenticate(
        ClientCredentials("c", "s", "client_secret_post"), form, audience=AUDIENCE
    )
    assert headers == {}
    assert form == {"client_id": "c", "client_secret": "s"}


def test_public_clients_send_only_their_client_id() -> None:
    form: dict[str, str] = {}
    assert authenticate(ClientCredentials("c"), form, audience=AUDIENCE) == {}
    assert form == {"client_id": "c"}


@pytest.mark.parametrize("alg", ["ES256", "RS256", "EdDSA"])
def test_clx1_private_key_jwt_assertion_has_the_rfc7523_claims(alg: jose.Algorithm) -> None:
    key = jose.generate_private_key(alg)
    creds = ClientCredentials(
        "svc", auth_method="private_key_jwt", private_key=key, signing_alg=alg
    )
    form: dict[str, str] = {}
    assert authenticate(creds, form, audience=AUDIENCE, now=1000.0) == {}
    assert form["client_assertion_type"] == CLIENT_ASSERTION_TYPE
    assert "client_id" not in form  # RFC 7523 §2.2: the assertion identifies the client
    claims = pyjwt.decode(
        form["client_assertion"],
        key.public_key(),  # type: ignore[arg-type]
        algorithms=[alg],
        audience=AUDIENCE,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims["iss"] == claims["sub"] == "svc"
    assert claims["exp"] - claims["iat"] <= 60
    assert claims["jti"]
    assert pyjwt.get_unverified_header(form["client_assertion"])["kid"]


def test_clx1_assertions_are_unique() -> None:
    key = jose.generate_private_key("ES256")
    creds = ClientCredentials("svc", auth_method="private_key_jwt", private_key=key)
    first: dict[str, str] = {}
    second: dict[str, str] = {}
    authenticate(creds, first, audience=AUDIENCE)
    authenticate(creds, second, audience=AUDIENCE)
    decode = lambda f: pyjwt.decode(f["client_assertion"], options={"verify_signature": False})  # noqa: E731
    assert decode(first)["jti"] != decode(second)["jti"]


def test_credentials_refuse_inconsistent_methods() -> None:
    with pytest.raises(RegistrationError):
        ClientCredentials("c", auth_method="private_key_jwt")
    with pytest.raises(RegistrationError):
        ClientCredentials("c", auth_method="client_secret_basic")


def test_stored_credentials_never_hold_a_private_key() -> None:
    key = jose.generate_private_key("ES256")
    creds = ClientCredentials("svc", auth_method="private_key_jwt", private_key=key)
    assert "private" not in json.dumps(creds.to_json()).lower().replace("private_key_jwt", "")


def test_clx1_client_credentials_grant_sends_resource_and_scope(
    fake: FakeServers, driver: Driver
) -> None:
    fake.challenge_scope = "jobs"
    key = jose.generate_private_key("ES256")
    creds = ClientCredentials("svc", auth_method="private_key_jwt", private_key=key)
    driver.run(make_flow(fake, grant=ClientCredentialsGrant(), credentials=creds).request_flow())
    (request,) = fake.token_requests
    assert request["grant_type"] == "client_credentials"
    assert request["resource"] == fake.resource
    assert request["scope"] == "jobs"
    assert "offline_access" not in request["scope"]
    claims = pyjwt.decode(request["client_assertion"], options={"verify_signature": False})
    assert claims["aud"] == fake.base  # the issuer


def test_clx2_enterprise_flow_exchanges_the_id_token_then_redeems_the_id_jag(
    fake: FakeServers,
) -> None:
    idp = "https://idp.example/token"
    seen: list[HTTPRequest] = []

    def idp_token(request: HTTPRequest) -> HTTPResponse:
        seen.append(request)
        body = {"access_token": "the-id-jag", "issued_token_type": ID_JAG_TYPE, "token_type": "N_A"}
        return HTTPResponse(200, {}, json.dumps(body).encode())

    with httpx2.Client(transport=_SyncASGI(fake), base_url=fake.base) as client:
        driver = fake_driver(fake, client)
        inner = driver._http
        assert inner is not None
        driver._http = lambda r: idp_token(r) if r.url == idp else inner(r)
        identity = IdentityAssertion(idp, "the-id-token", idp_client_id="idp-client")
        creds = ClientCredentials("xaa", "xaa-secret", "client_secret_basic")
        flow = make_flow(fake, grant=JWTBearerGrant(identity), credentials=creds)
        driver.run(flow.request_flow())
    exchange = seen[0].form()
    assert exchange["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
    assert exchange["requested_token_type"] == ID_JAG_TYPE
    assert exchange["subject_token"] == "the-id-token"
    assert exchange["audience"] == fake.base
    assert exchange["resource"] == fake.resource
    (redeem,) = fake.token_requests
    assert redeem["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert redeem["assertion"] == "the-id-jag"
    assert redeem["authorization"].startswith("Basic ")


def test_clx2_an_idp_that_returns_no_id_jag_is_an_error() -> None:
    reply = HTTPResponse(200, {}, b'{"access_token":"x","issued_token_type":"urn:other"}')
    driver = Driver({"POST https://idp.example/token": reply})
    with pytest.raises(TokenRequestFailed, match="ID-JAG"):
        driver.run(
            exchange_for_id_jag(
                IdentityAssertion("https://idp.example/token", "t"),
                audience="a",
                resource="r",
                scope=None,
            )
        )
