"""Single use under concurrency against the real server process: 20
simultaneous redemptions of one authorization code give exactly one 200; every other request is
a 400 invalid_grant, never a 500, and the losers are replays, so the grant the winner got tokens
from is revoked as well. 20 simultaneous refreshes of one refresh token are one rotation and its
replays within the reuse grace: all 200, each with its own refresh token of the one live grant."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import httpx2
import pytest

from .test_authorization_flow import (
    RESOURCE,
    Authorization,
    AuthServer,
    Browser,
    assert_invalid_grant,
    assert_token_response,
    auth_server,
    authorize,
    refresh,
    register_public_client,
)

pytestmark = pytest.mark.e2e

RACERS = 20
ROUNDS = 3
REDIRECT_URI = "http://127.0.0.1/callback"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    with auth_server(tmp_path_factory.mktemp("concurrency")) as running_server:
        yield running_server


@pytest.fixture(scope="module")
def client_id(server: AuthServer) -> str:
    return register_public_client(server, REDIRECT_URI)


@pytest.fixture(scope="module")
def browser(server: AuthServer) -> Iterator[Browser]:
    with Browser(server.issuer) as signed_in:
        yield signed_in


def _mint(server: AuthServer, browser: Browser, client_id: str) -> Authorization:
    # the first call signs in and consents; later ones go straight back with a code
    pages = None if browser.http.cookies else ["login", "consent"]
    auth = authorize(server, browser, client_id, REDIRECT_URI, pages=pages or [])
    return auth


async def _race(url: str, form: dict[str, str]) -> list[httpx2.Response]:
    """POST ``form`` RACERS times at once over connections opened beforehand, so that the
    requests reach the server together rather than one connection set-up apart."""
    limits = httpx2.Limits(max_connections=RACERS, max_keepalive_connections=RACERS)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
        health = url.rsplit("/", 1)[0] + "/health"
        await asyncio.gather(*(http.get(health) for _ in range(RACERS)))
        return list(await asyncio.gather(*(http.post(url, data=form) for _ in range(RACERS))))


def _one_winner(responses: list[httpx2.Response]) -> httpx2.Response:
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: 1, 400: RACERS - 1}, {
        r.status_code: r.text for r in responses if r.status_code != 200
    }
    for response in responses:
        if response.status_code == 400:
            assert response.json()["error"] == "invalid_grant", response.text
    return next(r for r in responses if r.status_code == 200)


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_twenty_simultaneous_redemptions_of_one_code_have_exactly_one_winner(
    server: AuthServer, browser: Browser, client_id: str, round_: int
) -> None:
    auth = _mint(server, browser, client_id)
    form = {
        "grant_type": "authorization_code",
        "code": auth.code,
        "redirect_uri": auth.redirect_uri,
        "code_verifier": auth.verifier,
        "client_id": client_id,
        "resource": RESOURCE,
    }
    winner = _one_winner(asyncio.run(_race(server.token_endpoint, form)))
    issued = assert_token_response(server, winner, client_id)
    # the other nineteen were replays of the code: the winner's grant is revoked
    assert_invalid_grant(refresh(server, client_id, issued["refresh_token"]))


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_twenty_simultaneous_refreshes_of_one_refresh_token_all_get_a_usable_token(
    server: AuthServer, browser: Browser, client_id: str, round_: int
) -> None:
    auth = _mint(server, browser, client_id)
    redeemed = httpx2.post(
        server.token_endpoint,
        data={
            "grant_type": "authorization_code",
            "code": auth.code,
            "redirect_uri": auth.redirect_uri,
            "code_verifier": auth.verifier,
            "client_id": client_id,
            "resource": RESOURCE,
        },
        timeout=30,
    )
    refresh_token = assert_token_response(server, redeemed, client_id)["refresh_token"]
    form = {
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": client_id,
        "resource": RESOURCE,
    }
    responses = asyncio.run(_race(server.token_endpoint, form))
    assert [r.status_code for r in responses] == [200] * RACERS, [r.text for r in responses]
    issued = {assert_token_response(server, r, client_id)["refresh_token"] for r in responses}
    assert len(issued) == RACERS
    assert refresh_token not in issued
    # the nineteen replays were within the grace: nothing was revoked, every token works
    for token in issued:
        assert_token_response(server, refresh(server, client_id, token), client_id)


def test_the_racing_rounds_left_the_server_healthy(server: AuthServer) -> None:
    assert server.process is not None
    assert server.process.poll() is None
    assert httpx2.get(f"{server.issuer}/health", timeout=10).status_code == 200
