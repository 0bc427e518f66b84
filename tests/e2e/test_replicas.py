"""Two `mcpauth serve` processes on one PostgreSQL database behave as one authorization server
. Both run with the same MCPAUTH_SECRET_KEY and the same issuer string; a
client may talk to either: a browser whose requests alternate between them signs in and
consents, a code issued through one is redeemed through the other, concurrent redemptions split
across both have exactly one winner, concurrent refreshes split across both all succeed within
the reuse grace with tokens that work through either, login throttling is shared, and signing keys
are shared, a `mcpauth keys rotate` run on the database being published by both."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from sqlalchemy import text

from mcpauth import jwt
from mcpauth.server.browser.login import account_key
from mcpauth.server.storage.database import make_engine

from ..oauth import forms, pkce_pair, query
from ..pg import PostgresServer
from ..support import free_port
from .cluster import Balancer, at, cluster, replica
from .test_authorization_flow import (
    PASSWORD,
    RESOURCE,
    Authorization,
    AuthServer,
    Browser,
    assert_invalid_grant,
    assert_token_response,
    authorization_url,
    register_public_client,
)

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

RACERS = 20
ROUNDS = 2
MAX_FAILURES = 3  # login_max_failures on both replicas (the address limit is 4 times that)
KEY_RELOAD_INTERVAL = 0.5  # seconds between the replicas' key reloads (5 by default)
KEY_RELOAD_BOUND = 20.0  # a rotation is published within the interval; allow for a loaded machine
REDIRECT_URI = "http://127.0.0.1/callback"


class Replicas:
    def __init__(self, server: AuthServer, ports: tuple[int, int]) -> None:
        self.server = server
        self.ports = ports

    def base(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports[index]}"

    def token_endpoint(self, index: int) -> str:
        return at(self.server.token_endpoint, self.ports[index])

    def jwks(self, index: int) -> dict[str, Any]:
        response = httpx2.get(at(self.server.metadata["jwks_uri"], self.ports[index]), timeout=10)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def kids(self, index: int) -> set[str]:
        return {key["kid"] for key in self.jwks(index)["keys"]}

    def browser(self, *indexes: int) -> Browser:
        """A browser whose requests to the issuer go to these replicas in turn."""
        browser = Browser(self.server.issuer)
        browser.http.close()
        transport = Balancer([self.ports[i] for i in indexes])
        browser.http = httpx2.Client(timeout=30, transport=transport)
        return browser


@pytest.fixture(scope="module")
def replicas(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    database = postgres_server.create_database()
    try:
        server = cluster(tmp_path_factory.mktemp("replicas"), postgres_server.url(database))
        ports = (server.port, free_port())
        env = {
            "MCPAUTH_LOGIN_MAX_FAILURES": str(MAX_FAILURES),
            "MCPAUTH_KEY_RELOAD_INTERVAL": str(KEY_RELOAD_INTERVAL),
        }
        with replica(server, ports[0], extra_env=env), replica(server, ports[1], extra_env=env):
            yield Replicas(server, ports)
    finally:
        postgres_server.drop_database(database)


@pytest.fixture(scope="module")
def client_id(replicas: Replicas) -> str:
    return register_public_client(replicas.server, REDIRECT_URI)


@pytest.fixture(scope="module")
def browser(replicas: Replicas) -> Iterator[Browser]:
    """Signed in and consented through replica A only."""
    with replicas.browser(0) as signed_in:
        yield signed_in


def _authorize(replicas: Replicas, browser: Browser, client_id: str) -> Authorization:
    verifier, challenge = pkce_pair()
    url = authorization_url(replicas.server, client_id, REDIRECT_URI, challenge, "s")
    response, _ = browser.authorize(url)
    params = query(response.headers["location"])
    assert params["iss"] == replicas.server.issuer
    return Authorization(client_id, REDIRECT_URI, verifier, params["code"], "s")


def _code_form(auth: Authorization) -> dict[str, str]:
    return {
        "grant_type": "authorization_code",
        "code": auth.code,
        "redirect_uri": auth.redirect_uri,
        "code_verifier": auth.verifier,
        "client_id": auth.client_id,
        "resource": RESOURCE,
    }


def _refresh_form(client_id: str, refresh_token: str) -> dict[str, str]:
    return {
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": client_id,
        "resource": RESOURCE,
    }


def _verify_everywhere(replicas: Replicas, access_token: str) -> dict[str, Any]:
    """The token verifies against the JWKS of both replicas, with the one issuer."""
    claims: dict[str, Any] = {}
    for index in (0, 1):
        keys = jwt.key_set(replicas.jwks(index))
        claims = jwt.verify(access_token, keys, issuer=replicas.server.issuer, audience=RESOURCE)
    return claims


def test_a_browser_whose_requests_alternate_between_the_replicas_signs_in_and_consents(
    replicas: Replicas, client_id: str
) -> None:
    with replicas.browser(0, 1) as browser:
        verifier, challenge = pkce_pair()
        url = authorization_url(replicas.server, client_id, REDIRECT_URI, challenge, "rr")
        response, shown = browser.authorize(url)
        assert shown == ["login", "consent"]
        transport = browser.http._transport
        assert isinstance(transport, Balancer)
        assert set(transport.served) == set(replicas.ports)
    params = query(response.headers["location"])
    auth = Authorization(client_id, REDIRECT_URI, verifier, params["code"], "rr")
    issued = httpx2.post(replicas.token_endpoint(1), data=_code_form(auth), timeout=30)
    body = assert_token_response(replicas.server, issued, client_id)
    _verify_everywhere(replicas, body["access_token"])


def test_a_code_issued_through_one_replica_is_redeemed_through_the_other(
    replicas: Replicas, browser: Browser, client_id: str
) -> None:
    auth = _authorize(replicas, browser, client_id)  # through A
    redeemed = httpx2.post(replicas.token_endpoint(1), data=_code_form(auth), timeout=30)
    first = assert_token_response(replicas.server, redeemed, client_id)
    assert _verify_everywhere(replicas, first["access_token"])["iss"] == replicas.server.issuer

    # the refresh token from B rotates through A, and the rotated one through B
    through_a = httpx2.post(
        replicas.token_endpoint(0),
        data=_refresh_form(client_id, first["refresh_token"]),
        timeout=30,
    )
    second = assert_token_response(replicas.server, through_a, client_id)
    through_b = httpx2.post(
        replicas.token_endpoint(1),
        data=_refresh_form(client_id, second["refresh_token"]),
        timeout=30,
    )
    third = assert_token_response(replicas.server, through_b, client_id)

    # the spent code is spent on A too, and its replay there revokes the grant B issued
    assert_invalid_grant(httpx2.post(replicas.token_endpoint(0), data=_code_form(auth), timeout=30))
    assert_invalid_grant(
        httpx2.post(
            replicas.token_endpoint(1),
            data=_refresh_form(client_id, third["refresh_token"]),
            timeout=30,
        )
    )


async def _race(replicas: Replicas, form: dict[str, str]) -> list[httpx2.Response]:
    """POST ``form`` RACERS times at once, half to each replica, over connections opened
    beforehand so that the requests arrive together."""
    half = RACERS // 2
    limits = httpx2.Limits(max_connections=RACERS, max_keepalive_connections=RACERS)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
        await asyncio.gather(
            *(http.get(f"{replicas.base(i % 2)}/health") for i in range(RACERS + 2))
        )
        urls = [replicas.token_endpoint(i % 2) for i in range(2 * half)]
        return list(await asyncio.gather(*(http.post(url, data=form) for url in urls)))


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
def test_twenty_concurrent_redemptions_of_one_code_split_across_both_replicas_have_one_winner(
    replicas: Replicas, browser: Browser, client_id: str, round_: int
) -> None:
    auth = _authorize(replicas, browser, client_id)
    winner = _one_winner(asyncio.run(_race(replicas, _code_form(auth))))
    issued = assert_token_response(replicas.server, winner, client_id)
    # the losers were replays: the winner's grant is revoked on both replicas
    for index in (0, 1):
        assert_invalid_grant(
            httpx2.post(
                replicas.token_endpoint(index),
                data=_refresh_form(client_id, issued["refresh_token"]),
                timeout=30,
            )
        )


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_twenty_concurrent_refreshes_of_one_token_split_across_both_replicas_all_succeed(
    replicas: Replicas, browser: Browser, client_id: str, round_: int
) -> None:
    auth = _authorize(replicas, browser, client_id)
    redeemed = httpx2.post(replicas.token_endpoint(round_ % 2), data=_code_form(auth), timeout=30)
    refresh_token = assert_token_response(replicas.server, redeemed, client_id)["refresh_token"]
    responses = asyncio.run(_race(replicas, _refresh_form(client_id, refresh_token)))
    assert [r.status_code for r in responses] == [200] * RACERS, [r.text for r in responses]
    issued = [assert_token_response(replicas.server, r, client_id) for r in responses]
    assert len({body["refresh_token"] for body in issued} | {refresh_token}) == RACERS + 1
    # one rotation and its replays within the grace: every token works through the other replica
    for index, body in enumerate(issued):
        used = httpx2.post(
            replicas.token_endpoint((index + 1) % 2),
            data=_refresh_form(client_id, body["refresh_token"]),
            timeout=30,
        )
        assert_token_response(replicas.server, used, client_id)


def _login_page(browser: Browser, url: str) -> httpx2.Response:
    page = browser.follow(browser.http.get(url))
    assert page.status_code == 200, page.text[:500]
    assert "password" in forms(page.text)[0].fields
    return page


def test_failed_logins_through_one_replica_lock_the_account_on_the_other(
    replicas: Replicas, client_id: str
) -> None:
    replicas.server.cli("users", "add", "carol", "--password-stdin", stdin=PASSWORD + "\n")
    _, challenge = pkce_pair()
    url = authorization_url(replicas.server, client_id, REDIRECT_URI, challenge, "t")
    with replicas.browser(0) as through_a:
        page = _login_page(through_a, url)
        for _ in range(MAX_FAILURES):
            page = through_a.submit(page, {"username": "carol", "password": "wrong password!"})
            assert page.status_code == 200, page.text[:500]
            assert "Wrong username or password" in page.text
    with replicas.browser(1) as through_b:
        page = _login_page(through_b, url)
        locked = through_b.submit(page, {"username": "carol", "password": PASSWORD})
    assert locked.status_code == 429, locked.text[:500]
    assert 0 < int(locked.headers["retry-after"]) <= 60


def test_signing_keys_are_shared_and_a_cli_rotation_is_published_and_used_by_both(
    replicas: Replicas, browser: Browser, client_id: str
) -> None:
    before = replicas.kids(0)
    assert before
    assert replicas.kids(1) == before
    old = assert_token_response(
        replicas.server,
        httpx2.post(
            replicas.token_endpoint(0),
            data=_code_form(_authorize(replicas, browser, client_id)),
            timeout=30,
        ),
        client_id,
    )

    rotated = replicas.server.cli("keys", "rotate")
    new_kids: set[str] = set()
    deadline = time.monotonic() + KEY_RELOAD_BOUND
    while time.monotonic() < deadline:
        published = [replicas.kids(0), replicas.kids(1)]
        new_kids = (published[0] & published[1]) - before
        if new_kids and published[0] == published[1]:
            break
        time.sleep(0.25)
    assert len(new_kids) == 1, f"after {KEY_RELOAD_BOUND} s: {published}; rotate: {rotated.stdout}"
    (new_kid,) = new_kids
    assert new_kid in rotated.stdout

    # with no rotation delay both replicas sign with the new key, and the old key stays
    # published: the token issued before the rotation still verifies everywhere
    for index in (0, 1):
        issued = httpx2.post(
            replicas.token_endpoint(index),
            data=_code_form(_authorize(replicas, browser, client_id)),
            timeout=30,
        )
        body = assert_token_response(replicas.server, issued, client_id)
        assert jwt.unverified_header(body["access_token"])["kid"] == new_kid
        _verify_everywhere(replicas, body["access_token"])
    assert jwt.unverified_header(old["access_token"])["kid"] in before
    _verify_everywhere(replicas, old["access_token"])


async def _failed_logins(
    replicas: Replicas, client_id: str, username: str, count: int
) -> Counter[int]:
    """``count`` wrong-password sign-ins for ``username`` at once, alternating replicas, each
    from its own browser session (login page fetched beforehand)."""
    _, challenge = pkce_pair()
    url = authorization_url(replicas.server, client_id, REDIRECT_URI, challenge, "x")
    pages: list[tuple[httpx2.AsyncClient, str, dict[str, str]]] = []
    clients = [httpx2.AsyncClient(timeout=60) for _ in range(count)]
    try:
        for index, http in enumerate(clients):
            port = replicas.ports[index % 2]
            response = await http.get(at(url, port))
            while response.status_code in (302, 303):
                response = await http.get(at(response.headers["location"], port))
            form = forms(response.text)[0]
            pages.append((http, at(form.action, port), form.fields))
        responses = await asyncio.gather(
            *(
                http.post(action, data={**fields, "username": username, "password": "nope-nope"})
                for http, action, fields in pages
            )
        )
    finally:
        for http in clients:
            await http.aclose()
    return Counter(r.status_code for r in responses)


def test_concurrent_failed_logins_across_replicas_are_all_counted(
    replicas: Replicas, client_id: str
) -> None:
    replicas.server.cli("users", "add", "dave", "--password-stdin", stdin=PASSWORD + "\n")
    statuses = asyncio.run(_failed_logins(replicas, client_id, "dave", 2 * MAX_FAILURES))
    assert 500 not in statuses, statuses
    engine = make_engine(replicas.server.database)
    try:
        with engine.connect() as conn:
            failures = conn.execute(
                text("SELECT failures FROM throttles WHERE key = :key"),
                {"key": account_key("dave", "127.0.0.1")},
            ).scalar()
    finally:
        engine.dispose()
    assert failures == statuses[200], (failures, statuses)  # the form again, with the error
