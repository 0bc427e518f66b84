"""The device authorization grant, client side (RFC 8628), stepped by hand: the request, what
the person is shown, and polling that honours the interval, slow_down, denial and expiry."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from mcpauth.client import AuthorizationCodeGrant, DeviceCodeGrant
from mcpauth.client._http import HTTPRequest, HTTPResponse
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.device import (
    ShowUserCode,
    Wait,
    device_authorization_request,
    device_flow,
    parse_device_authorization,
)
from mcpauth.client.errors import AuthorizationFailed, TokenRequestFailed
from mcpauth.client.flow import FlowConfig, OAuthFlow
from mcpauth.client.registration import CODE_GRANTS, DEVICE_GRANTS
from mcpauth.client.storage import MemoryStorage
from mcpauth.client.tokens import TokenSet
from mcpauth.metadata import AuthorizationServerMetadata
from mcpauth.oauth import DEVICE_CODE

ISSUER = "https://as.example.com"
METADATA = AuthorizationServerMetadata(
    issuer=ISSUER,
    token_endpoint=f"{ISSUER}/token",
    device_authorization_endpoint=f"{ISSUER}/device_authorization",
)
STARTED = {
    "device_code": "dc-1",
    "user_code": "BCDF-GHJK",
    "verification_uri": f"{ISSUER}/device",
    "verification_uri_complete": f"{ISSUER}/device?user_code=BCDF-GHJK",
    "expires_in": 600,
    "interval": 5,
}


def answer(status: int, body: dict[str, Any]) -> HTTPResponse:
    return HTTPResponse(status, {"content-type": "application/json"}, json.dumps(body).encode())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(
    outcomes: list[str | TokenSet], *, clock: Clock | None = None, timeout: float | None = None
) -> tuple[list[Any], Any]:
    """Drive :func:`device_flow` with scripted poll outcomes (an error code, or the tokens);
    each Wait moves the clock. Returns the steps and the flow's result (or its exception)."""
    clock = clock or Clock()
    polls = iter(outcomes)

    def token_call(form: dict[str, str]) -> Generator[Any, Any, TokenSet]:
        assert form == {"grant_type": DEVICE_CODE, "device_code": "dc-1", "resource": "r"}
        yield HTTPRequest("POST", f"{ISSUER}/token")
        outcome = next(polls)
        if isinstance(outcome, str):
            raise TokenRequestFailed(outcome, "scripted")
        return outcome

    start = HTTPRequest("POST", f"{ISSUER}/device_authorization")
    flow = device_flow(start, token_call, resource="r", clock=clock, timeout=timeout)
    steps: list[Any] = []
    result: Any = None
    try:
        step = next(flow)
        while True:
            steps.append(step)
            if step is start:
                result = answer(200, STARTED)
            elif isinstance(step, Wait):
                clock.now += step.seconds
                result = None
            else:
                result = None
            step = flow.send(result)
    except StopIteration as stop:
        return steps, stop.value
    except (AuthorizationFailed, TokenRequestFailed) as error:
        return steps, error


def waits(steps: list[Any]) -> list[float]:
    return [step.seconds for step in steps if isinstance(step, Wait)]


TOKENS = TokenSet("at", refresh_token="rt")


def test_the_code_is_shown_then_polled_at_the_interval_until_approved() -> None:
    steps, result = run(["authorization_pending", "authorization_pending", TOKENS])
    assert result is TOKENS
    shown = [step for step in steps if isinstance(step, ShowUserCode)]
    assert len(shown) == 1
    assert shown[0].authorization.user_code == "BCDF-GHJK"
    assert shown[0].authorization.verification_uri == f"{ISSUER}/device"
    assert steps.index(shown[0]) < steps.index(next(s for s in steps if isinstance(s, Wait)))
    assert waits(steps) == [5, 5, 5]


def test_slow_down_adds_five_seconds_for_every_later_poll() -> None:
    steps, result = run(["slow_down", "authorization_pending", "slow_down", TOKENS])
    assert result is TOKENS
    assert waits(steps) == [5, 10, 10, 15]


@pytest.mark.parametrize(
    ("code", "error"), [("access_denied", "access_denied"), ("expired_token", "expired_token")]
)
def test_denial_and_expiry_end_the_flow(code: str, error: str) -> None:
    _, result = run(["authorization_pending", code])
    assert isinstance(result, AuthorizationFailed)
    assert result.error == error


def test_another_token_error_is_raised_as_it_came() -> None:
    _, result = run(["invalid_grant"])
    assert isinstance(result, TokenRequestFailed)
    assert result.error == "invalid_grant"


def test_the_wait_ends_at_the_timeout_without_another_poll() -> None:
    steps, result = run(["authorization_pending"] * 10, timeout=12)
    assert isinstance(result, AuthorizationFailed)
    assert result.error == "expired_token"
    assert len([s for s in steps if isinstance(s, HTTPRequest)]) == 1 + 2  # start, two polls


def test_the_request_authenticates_the_client_and_names_resource_and_scope() -> None:
    public = device_authorization_request(
        METADATA, ClientCredentials("tv"), resource="https://mcp.example.com/", scope="a b"
    )
    assert public.url == f"{ISSUER}/device_authorization"
    assert public.form() == {
        "resource": "https://mcp.example.com/",
        "scope": "a b",
        "client_id": "tv",
    }
    confidential = device_authorization_request(
        METADATA, ClientCredentials("kiosk", "s3cret"), resource=None, scope=None
    )
    assert confidential.headers["authorization"].startswith("Basic ")
    assert "client_secret" not in confidential.form()


def test_a_server_without_the_endpoint_is_told_apart() -> None:
    bare = AuthorizationServerMetadata(issuer=ISSUER, token_endpoint=f"{ISSUER}/token")
    with pytest.raises(AuthorizationFailed, match="does not offer the device authorization"):
        device_authorization_request(bare, ClientCredentials("tv"), resource=None, scope=None)


@pytest.mark.parametrize(
    ("response", "raised", "message"),
    [
        (
            answer(400, {"error": "invalid_scope", "error_description": "no"}),
            TokenRequestFailed,
            "invalid_scope",
        ),
        (
            answer(200, {**STARTED, "device_code": ""}),
            AuthorizationFailed,
            "no device or user code",
        ),
        (
            answer(200, {**STARTED, "verification_uri": "http://evil.example/device"}),
            AuthorizationFailed,
            "https",
        ),
        (HTTPResponse(200, {}, b"not json"), TokenRequestFailed, "server_error"),
    ],
)
def test_bad_device_authorization_responses_are_refused(
    response: HTTPResponse, raised: type[Exception], message: str
) -> None:
    with pytest.raises(raised, match=message):
        parse_device_authorization(response)


def test_missing_numbers_fall_back_and_a_bad_complete_uri_is_dropped() -> None:
    body = {
        **STARTED,
        "interval": "soon",
        "expires_in": True,
        "verification_uri_complete": "javascript:x",
    }
    _, shown = parse_device_authorization(answer(200, body))
    assert (shown.interval, shown.expires_in, shown.verification_uri_complete) == (5, 600, None)


def test_a_client_registered_for_the_other_grant_is_registered_afresh() -> None:
    def flow(grant: Any) -> OAuthFlow:
        return OAuthFlow(FlowConfig("https://mcp.example.com/", grant=grant), MemoryStorage())

    code_client = ClientCredentials("c", source="dcr", grant_types=CODE_GRANTS)
    device_client = ClientCredentials("d", source="dcr", grant_types=DEVICE_GRANTS)
    older = ClientCredentials("o", source="dcr")  # stored before grants were recorded
    device = flow(DeviceCodeGrant())
    assert [device._fits(c) for c in (code_client, device_client, older)] == [False, True, False]
    code = flow(AuthorizationCodeGrant())
    assert [code._fits(c) for c in (code_client, device_client, older)] == [True, False, True]
    assert device._fits(ClientCredentials("pre"))  # pre-registered: the operator's choice


def test_credentials_keep_the_grants_they_were_registered_for() -> None:
    stored = ClientCredentials("d", source="dcr", grant_types=DEVICE_GRANTS).to_json()
    assert ClientCredentials.from_json(stored).grant_types == DEVICE_GRANTS
    assert ClientCredentials.from_json({"client_id": "old"}).grant_types == ()
