"""Getting a client ID (CL-07..CL-11, CL-20, CL-21)."""

from __future__ import annotations

import json

import pytest

from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.errors import RegistrationError
from mcpauth.client.flow import HTTPResponse
from mcpauth.client.options import ClientCredentialsGrant
from mcpauth.client.registration import (
    Registration,
    application_type,
    choose_auth_method,
    parse_registration_response,
    registration_request,
)
from mcpauth.client.storage import MemoryStorage
from mcpauth.metadata import AuthorizationServerMetadata
from tests.client.conftest import REDIRECT_URI, Driver
from tests.client.conftest import make_flow as flow
from tests.client.fakes import FakeServers

CIMD = "https://app.example.com/client.json"


def metadata(**extra: object) -> AuthorizationServerMetadata:
    return AuthorizationServerMetadata.model_validate(
        {
            "issuer": "https://as.example",
            "registration_endpoint": "https://as.example/register",
            **extra,
        }
    )


def authorize_client_ids(fake: FakeServers) -> list[str]:
    return [request["client_id"] for request in fake.authorize_requests]


def test_cl07_pre_registered_credentials_come_first(fake: FakeServers, driver: Driver) -> None:
    fake.auth_methods = ["client_secret_basic"]
    creds = ClientCredentials("pre", "s3cret", "client_secret_basic")
    driver.run(
        flow(
            fake, credentials=creds, registration=Registration(client_metadata_url=CIMD)
        ).request_flow()
    )
    assert authorize_client_ids(fake) == ["pre"]
    assert fake.registrations == []
    assert fake.token_requests[0]["authorization"].startswith("Basic ")


def test_cl08_a_cimd_url_is_used_when_the_server_advertises_support(
    fake: FakeServers, driver: Driver
) -> None:
    original = fake.metadata
    fake.metadata = lambda: {**original(), "client_id_metadata_document_supported": True}  # type: ignore[method-assign]
    driver.run(flow(fake, registration=Registration(client_metadata_url=CIMD)).request_flow())
    assert authorize_client_ids(fake) == [CIMD]
    assert fake.registrations == []


def test_cl08_without_the_server_flag_the_cimd_url_is_not_used(
    fake: FakeServers, driver: Driver
) -> None:
    driver.run(flow(fake, registration=Registration(client_metadata_url=CIMD)).request_flow())
    assert authorize_client_ids(fake) == ["client-1"]
    assert len(fake.registrations) == 1


def test_cl10_dynamic_registration_sends_application_type_native_for_loopback(
    fake: FakeServers, driver: Driver
) -> None:
    driver.run(flow(fake).request_flow())
    (body,) = fake.registrations
    assert body["application_type"] == "native"
    assert body["redirect_uris"] == [REDIRECT_URI]


@pytest.mark.parametrize(
    ("uris", "expected"),
    [
        (["http://127.0.0.1:1/cb"], "native"),
        (["http://localhost/cb", "http://[::1]:3/cb"], "native"),
        (["https://app.example.com/cb"], "web"),
        (["http://127.0.0.1/cb", "https://app.example.com/cb"], "web"),
    ],
)
def test_cl10_application_type_follows_the_redirect_uris(uris: list[str], expected: str) -> None:
    assert application_type(uris) == expected


def test_cl21_dynamic_registration_asks_for_the_refresh_token_grant() -> None:
    request = registration_request(metadata(), Registration(), ["http://127.0.0.1/cb"])
    body = json.loads(request.body)
    assert body["grant_types"] == ["authorization_code", "refresh_token"]
    assert body["response_types"] == ["code"]


@pytest.mark.parametrize(
    ("supported", "expected"),
    [
        (None, "client_secret_basic"),  # RFC 8414 default
        (["none", "client_secret_basic"], "none"),
        (["client_secret_post"], "client_secret_post"),
        (["private_key_jwt"], "none"),
    ],
)
def test_the_registered_auth_method_is_one_the_server_accepts(
    supported: list[str] | None, expected: str
) -> None:
    assert choose_auth_method(metadata(token_endpoint_auth_methods_supported=supported)) == expected


def test_cl10_a_refused_registration_is_a_clear_error() -> None:
    refusal = HTTPResponse(
        400, {}, b'{"error":"invalid_redirect_uri","error_description":"loopback only"}'
    )
    with pytest.raises(RegistrationError, match="invalid_redirect_uri loopback only"):
        parse_registration_response(refusal, "https://as.example")


def test_cl07_without_cimd_or_registration_the_error_asks_for_a_client_id(
    fake: FakeServers, driver: Driver
) -> None:
    fake.registration = False
    with pytest.raises(RegistrationError, match="pre-registered client_id"):
        driver.run(flow(fake).request_flow())
    assert fake.authorize_requests == []


def test_cl11_registered_credentials_are_stored_by_issuer(
    fake: FakeServers, driver: Driver
) -> None:
    storage = MemoryStorage()
    driver.run(flow(fake, storage).request_flow())
    stored = storage.get_client(fake.base)
    assert stored is not None
    assert stored.client_id == "client-1"
    assert stored.issuer == fake.base
    driver.run(flow(fake, storage).request_flow())  # a new process reuses them
    assert len(fake.registrations) == 1


def test_cl11_credentials_for_another_issuer_are_never_reused(
    fake: FakeServers, driver: Driver
) -> None:
    storage = MemoryStorage()
    storage.set_client(
        fake.base, ClientCredentials("old", issuer="https://old-as.example", source="dcr")
    )
    driver.run(flow(fake, storage).request_flow())
    assert authorize_client_ids(fake) == ["client-1"]
    assert len(fake.registrations) == 1


def test_cl11_pre_registered_credentials_for_another_issuer_are_an_error(
    fake: FakeServers, driver: Driver
) -> None:
    creds = ClientCredentials("pre", issuer="https://old-as.example")
    with pytest.raises(RegistrationError, match="old-as"):
        driver.run(flow(fake, credentials=creds).request_flow())


def test_client_credentials_without_a_client_are_an_error(
    fake: FakeServers, driver: Driver
) -> None:
    with pytest.raises(RegistrationError, match="pre-registered"):
        driver.run(flow(fake, grant=ClientCredentialsGrant()).request_flow())


def test_registration_responses_without_client_id_are_refused() -> None:
    with pytest.raises(RegistrationError, match="client_id"):
        parse_registration_response(HTTPResponse(201, {}, b"{}"), "https://as.example")


def test_a_secret_method_without_a_secret_falls_back_to_none() -> None:
    body = b'{"client_id":"c","token_endpoint_auth_method":"client_secret_basic"}'
    creds = parse_registration_response(HTTPResponse(201, {}, body), "https://as.example")
    assert creds.auth_method == "none"
