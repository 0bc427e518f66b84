"""Using, refreshing and upgrading tokens (CL-14, CL-16, CL-18, CL-21, CL-22), stepped by hand."""

from __future__ import annotations

import pytest

from mcpauth.client.errors import LoginRequired, TokenRequestFailed
from mcpauth.client.flow import Authorize, HTTPResponse, Resend
from mcpauth.client.options import ClientCredentialsGrant
from mcpauth.client.tokens import TokenSet, merge_refreshed, parse_token_response
from tests.client.conftest import Driver
from tests.client.conftest import make_flow as flow
from tests.client.fakes import FakeServers


def resends(driver: Driver) -> list[str | None]:
    return [s.authorization for s in driver.steps if isinstance(s, Resend)]


def authorizations(driver: Driver) -> int:
    return sum(isinstance(s, Authorize) for s in driver.steps)


def grants(fake: FakeServers) -> list[str]:
    return [r["grant_type"] for r in fake.token_requests]


def test_cl18_every_request_after_authorization_carries_the_bearer_token(
    fake: FakeServers, driver: Driver
) -> None:
    f = flow(fake)
    driver.run(f.request_flow())
    driver.run(f.request_flow())
    assert f.tokens is not None
    bearer = f"Bearer {f.tokens.access_token}"
    assert resends(driver) == [None, bearer, bearer]
    assert fake.resource_requests[-1] == bearer


def test_cl18_the_token_never_goes_in_a_query_string(fake: FakeServers, driver: Driver) -> None:
    driver.run(flow(fake).request_flow())
    assert all("access-" not in r.url for r in driver.requests())


def test_cl16_resource_is_sent_in_both_the_authorization_and_the_token_request(
    fake: FakeServers, driver: Driver
) -> None:
    driver.run(flow(fake).request_flow())
    assert fake.authorize_requests[0]["resource"] == fake.resource
    assert fake.token_requests[0]["resource"] == fake.resource


def test_the_token_request_proves_possession_of_the_pkce_verifier(
    fake: FakeServers, driver: Driver
) -> None:
    driver.run(flow(fake).request_flow())
    assert grants(fake) == ["authorization_code"]  # the fake checked S256(verifier) == challenge


def test_tokens_are_refreshed_ahead_of_expiry(fake: FakeServers, driver: Driver) -> None:
    f = flow(fake, refresh_margin=60)
    driver.run(f.request_flow())
    fake.now += fake.expires_in - 30  # inside the margin, still valid
    driver.run(f.request_flow())
    assert grants(fake) == ["authorization_code", "refresh_token"]
    assert authorizations(driver) == 1
    assert f.tokens is not None
    assert resends(driver)[-1] == f"Bearer {f.tokens.access_token}"


def test_a_401_is_answered_by_refreshing_before_a_full_authorization(
    fake: FakeServers, driver: Driver
) -> None:
    f = flow(fake)
    driver.run(f.request_flow())
    fake.tokens.clear()  # the server forgot the access token (restart, revocation)
    driver.run(f.request_flow())
    assert grants(fake) == ["authorization_code", "refresh_token"]
    assert authorizations(driver) == 1


def test_refresh_carries_the_resource(fake: FakeServers, driver: Driver) -> None:
    f = flow(fake)
    driver.run(f.request_flow())
    fake.tokens.clear()
    driver.run(f.request_flow())
    assert fake.token_requests[-1]["resource"] == fake.resource


def test_a_refused_refresh_falls_back_to_a_full_authorization(
    fake: FakeServers, driver: Driver
) -> None:
    f = flow(fake)
    driver.run(f.request_flow())
    fake.tokens.clear()
    fake.refresh_tokens.clear()
    driver.run(f.request_flow())
    assert grants(fake) == ["authorization_code", "refresh_token", "authorization_code"]
    assert authorizations(driver) == 2


def test_cl14_step_up_on_403_requests_the_union_of_scopes(
    fake: FakeServers, driver: Driver
) -> None:
    fake.challenge_scope = "files:read"
    f = flow(fake)
    driver.run(f.request_flow())
    fake.required_scopes = {"files:write"}
    driver.run(f.request_flow())
    scopes = [r.get("scope") for r in fake.authorize_requests]
    assert scopes == ["files:read", "files:read files:write"]
    assert fake.resource_requests[-1] is not None
    assert fake.tokens[fake.resource_requests[-1].removeprefix("Bearer ")].scopes == {
        "files:read",
        "files:write",
    }


def test_cl14_step_up_stops_after_three_attempts(fake: FakeServers, driver: Driver) -> None:
    f = flow(fake)
    driver.run(f.request_flow())
    fake.required_scopes = {"admin"}
    original = fake.issue
    # the user never grants "admin"
    fake.issue = lambda client_id, scope, jkt=None: original(client_id, "basic", jkt)  # type: ignore[method-assign]
    before = len(fake.authorize_requests)
    driver.run(f.request_flow())
    assert len(fake.authorize_requests) - before == 3


def test_cl14_no_step_up_when_the_token_already_has_the_challenged_scopes(
    fake: FakeServers, driver: Driver
) -> None:
    fake.challenge_scope = "admin"
    f = flow(fake)
    original = fake.check_bearer

    def always_forbidden(authorization: str | None, dpop: list[str] | None = None) -> object:
        refusal = original(authorization, dpop)
        return refusal or fake.challenge(403, "insufficient_scope", "admin")

    fake.check_bearer = always_forbidden  # type: ignore[assignment, method-assign]
    driver.run(f.request_flow())
    assert len(fake.authorize_requests) == 1  # scope-retry-limit: no pointless re-consent


def test_a_403_without_a_bearer_challenge_is_left_to_the_caller(fake: FakeServers) -> None:
    driver = Driver(resend=lambda _auth: HTTPResponse(403, {}, b"{}"))
    driver.run(flow(fake).request_flow())
    assert resends(driver) == [None]


def test_cl21_offline_access_is_requested_when_the_as_lists_it(
    fake: FakeServers, driver: Driver
) -> None:
    fake.scopes_supported = ["mcp"]
    fake.as_scopes = ["mcp", "offline_access"]
    driver.run(flow(fake).request_flow())
    assert fake.authorize_requests[0]["scope"] == "mcp offline_access"


def test_cl21_a_missing_refresh_token_is_not_assumed(fake: FakeServers, driver: Driver) -> None:
    fake.issue_refresh = False
    f = flow(fake)
    driver.run(f.request_flow())
    fake.now += fake.expires_in + 1
    driver.run(f.request_flow())
    assert grants(fake) == ["authorization_code", "authorization_code"]


def test_client_credentials_tokens_are_fetched_again_when_they_expire(
    fake: FakeServers, driver: Driver
) -> None:
    from mcpauth.client.credentials import ClientCredentials

    fake.issue_refresh = False
    creds = ClientCredentials("svc", "s3cret", "client_secret_basic")
    f = flow(fake, grant=ClientCredentialsGrant(), credentials=creds)
    driver.run(f.request_flow())
    fake.now += fake.expires_in
    driver.run(f.request_flow())
    assert grants(fake) == ["client_credentials", "client_credentials"]
    assert authorizations(driver) == 0


def test_acquire_without_interaction_needs_a_stored_token(
    fake: FakeServers, driver: Driver
) -> None:
    with pytest.raises(LoginRequired):
        driver.run(flow(fake).acquire_flow(interactive=False))


def test_acquire_probes_the_server_for_its_challenge(fake: FakeServers, driver: Driver) -> None:
    fake.challenge_scope = "tools"
    tokens = driver.run(flow(fake).acquire_flow())
    assert tokens.scope == "tools"
    assert driver.requests()[0].method == "POST"
    assert driver.requests()[0].url == fake.resource


# -- token responses --------------------------------------------------------------------------


def test_token_responses_get_an_absolute_expiry() -> None:
    response = HTTPResponse(200, {}, b'{"access_token":"t","token_type":"bearer","expires_in":60}')
    tokens = parse_token_response(response, now=1000.0, requested_scope="a")
    assert tokens.expires_at == 1060.0
    assert tokens.scope == "a"
    assert tokens.token_type == "Bearer"


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (400, b'{"error":"invalid_grant"}', "invalid_grant"),
        (500, b"oops", "server_error"),
        (200, b'{"token_type":"Bearer"}', "invalid_response"),
        (200, b'{"access_token":"t","token_type":"mac"}', "invalid_response"),
    ],
)
def test_bad_token_responses_raise_with_the_error_code(
    status: int, body: bytes, error: str
) -> None:
    with pytest.raises(TokenRequestFailed) as caught:
        parse_token_response(HTTPResponse(status, {}, body))
    assert caught.value.error == error


def test_a_refresh_without_rotation_keeps_the_old_refresh_token() -> None:
    old = TokenSet("a", refresh_token="r1")
    assert merge_refreshed(old, TokenSet("b")).refresh_token == "r1"
    assert merge_refreshed(old, TokenSet("b", refresh_token="r2")).refresh_token == "r2"


def test_cl22_token_sets_never_show_their_secrets() -> None:
    tokens = TokenSet("secret-access", refresh_token="secret-refresh", scope="a")
    assert "secret" not in repr(tokens)
    assert "secret" not in str(tokens)
