"""The device authorization grant (RFC 8628) in process: the endpoint's checks and caps, the
verification page (CSRF, throttled wrong codes, plain pages for codes that ended), the person's
sign-in and consent, and the token endpoint's answers while polling (docs/security.md T45)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from sqlalchemy import select
from starlette.applications import Starlette

from mcpauth import jwt
from mcpauth.oauth import DEVICE_CODE, basic_authorization
from mcpauth.server import Settings, admin, create_app
from mcpauth.server.storage import prune
from mcpauth.server.storage.models import DeviceAuthorization

from ..conftest import ISSUER
from ..oauth import follow, forms, submit
from .conftest import PASSWORD, RESOURCE

pytestmark = pytest.mark.anyio
DEVICE_GRANTS = [DEVICE_CODE, "refresh_token"]


class Clock:
    """The server's clock, moved by the tests (no sleeps)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def settings(make_settings: Any) -> Settings:
    return make_settings(
        device_user_code_failures=3,
        device_user_code_failures_total=5,
        device_max_pending_per_client=3,
        device_max_pending=5,
    )


@pytest.fixture
def app(settings: Settings, clock: Clock) -> Starlette:
    return create_app(settings, clock=clock)


def transport_from(app: Starlette, address: str) -> httpx2.AsyncClient:
    transport = httpx2.ASGITransport(app=app, client=(address, 50000))
    return httpx2.AsyncClient(transport=transport, base_url=ISSUER)


@pytest.fixture
async def device_client(seeded: Starlette, http: httpx2.AsyncClient) -> dict[str, Any]:
    body = {
        "client_name": "Living-room TV",
        "token_endpoint_auth_method": "none",
        "grant_types": DEVICE_GRANTS,
    }
    response = await http.post("/register", json=body)
    assert response.status_code == 201, response.text
    registered = dict(response.json())
    assert registered["grant_types"] == DEVICE_GRANTS
    assert "redirect_uris" not in registered or registered["redirect_uris"] == []
    return registered


async def start(http: httpx2.AsyncClient, client_id: str, **extra: str) -> httpx2.Response:
    return await http.post("/device_authorization", data={"client_id": client_id, **extra})


async def poll(http: httpx2.AsyncClient, client_id: str, device_code: str) -> httpx2.Response:
    form = {"grant_type": DEVICE_CODE, "device_code": device_code, "client_id": client_id}
    return await http.post("/token", data=form)


async def enter_code(http: httpx2.AsyncClient, user_code: str) -> httpx2.Response:
    page = await http.get("/device")
    assert page.status_code == 200
    return await submit(http, page, {"user_code": user_code})


async def approve(
    http: httpx2.AsyncClient, user_code: str, action: str = "approve"
) -> httpx2.Response:
    """The person: types the code, signs in, decides on the consent page."""
    page = await follow(http, await enter_code(http, user_code))
    assert page.status_code == 200, page.text
    page = await follow(http, await submit(http, page, {"username": "alice", "password": PASSWORD}))
    assert "approve" in page.text, page.text
    return await submit(http, page, {"action": action})


def error_of(response: httpx2.Response) -> str:
    return str(response.json()["error"])


async def test_metadata_advertises_the_endpoint_and_the_grant(http: httpx2.AsyncClient) -> None:
    document = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert document["device_authorization_endpoint"] == f"{ISSUER}/device_authorization"
    assert DEVICE_CODE in document["grant_types_supported"]


async def test_turned_off_there_is_no_endpoint_page_nor_grant(make_settings: Any) -> None:
    app = create_app(make_settings(device_flow=False))
    async with transport_from(app, "203.0.113.7") as http:
        document = (await http.get("/.well-known/oauth-authorization-server")).json()
        assert "device_authorization_endpoint" not in document
        assert DEVICE_CODE not in document["grant_types_supported"]
        assert (
            await http.post("/device_authorization", data={"client_id": "x"})
        ).status_code == 404
        assert (await http.get("/device")).status_code == 404


async def test_the_response_carries_both_codes_and_only_their_digests_are_stored(
    http: httpx2.AsyncClient, device_client: dict[str, Any], seeded: Starlette
) -> None:
    response = await start(http, device_client["client_id"])
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) == {
        "device_code",
        "user_code",
        "verification_uri",
        "verification_uri_complete",
        "expires_in",
        "interval",
    }
    assert len(body["user_code"]) == 9
    assert body["user_code"][4] == "-"
    assert body["verification_uri"] == f"{ISSUER}/device"
    assert body["verification_uri_complete"] == (
        f"{ISSUER}/device?{urlencode({'user_code': body['user_code']})}"
    )
    assert (body["expires_in"], body["interval"]) == (600, 5)
    with seeded.state.mcpauth.db.read() as session:
        rows = list(session.exec(select(DeviceAuthorization)))  # type: ignore[call-overload]
    assert len(rows) == 1
    stored = " ".join(str(value) for value in rows[0][0].model_dump().values())
    assert body["device_code"] not in stored
    assert body["user_code"].replace("-", "") not in stored
    assert rows[0][0].resource == RESOURCE
    assert rows[0][0].scope == "mcp:tools"


@pytest.mark.parametrize(
    ("form", "status", "error"),
    [
        ({"client_id": "nobody"}, 401, "invalid_client"),
        ({"scope": 'mcp:tools "x"'}, 400, "invalid_scope"),
        ({"resource": "http://127.0.0.1:9999/elsewhere"}, 400, "invalid_target"),
        ({"resource": "not a url"}, 400, "invalid_target"),
        (
            {"scope": "mcp:tools", "resource": [RESOURCE, "http://127.0.0.1:8001/mcp"]},
            400,
            "invalid_request",
        ),
        ({"scope": ["a", "b"]}, 400, "invalid_request"),
    ],
)
async def test_bad_device_authorization_requests_get_the_rfc_error(
    http: httpx2.AsyncClient,
    device_client: dict[str, Any],
    form: dict[str, Any],
    status: int,
    error: str,
) -> None:
    response = await http.post(
        "/device_authorization", data={"client_id": device_client["client_id"], **form}
    )
    assert (response.status_code, error_of(response)) == (status, error)
    assert response.json()["error_description"]


async def test_a_client_not_registered_for_the_grant_is_refused(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    response = await start(http, public_client["client_id"])
    assert (response.status_code, error_of(response)) == (400, "unauthorized_client")
    assert DEVICE_CODE in response.json()["error_description"]


async def test_the_request_must_be_a_form(
    http: httpx2.AsyncClient, device_client: dict[str, Any]
) -> None:
    response = await http.post(
        "/device_authorization", json={"client_id": device_client["client_id"]}
    )
    assert (response.status_code, error_of(response)) == (415, "invalid_request")


async def test_a_confidential_client_authenticates_as_at_the_token_endpoint(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    info = admin.add_client(
        seeded.state.mcpauth, name="Kiosk", grant_types=[DEVICE_CODE], scopes=["mcp:tools"]
    )
    wrong = basic_authorization(info["client_id"], "wrong")
    right = basic_authorization(info["client_id"], info["client_secret"] or "")
    form = {"scope": "mcp:tools"}
    refused = await http.post("/device_authorization", data=form, headers={"Authorization": wrong})
    assert (refused.status_code, error_of(refused)) == (401, "invalid_client")
    accepted = await http.post("/device_authorization", data=form, headers={"Authorization": right})
    assert accepted.status_code == 200, accepted.text
    device_code = accepted.json()["device_code"]
    unauthenticated = await poll(http, info["client_id"], device_code)
    assert error_of(unauthenticated) == "invalid_client"
    polled = await http.post(
        "/token",
        data={"grant_type": DEVICE_CODE, "device_code": device_code},
        headers={"Authorization": right},
    )
    assert error_of(polled) == "authorization_pending"


async def test_person_approves_and_the_device_gets_tokens_once(
    http: httpx2.AsyncClient, device_client: dict[str, Any], seeded: Starlette, clock: Clock
) -> None:
    client_id = device_client["client_id"]
    body = (await start(http, client_id, scope="mcp:tools mcp:admin")).json()
    assert error_of(await poll(http, client_id, body["device_code"])) == "authorization_pending"

    page = await follow(http, await enter_code(http, body["user_code"].lower()))
    page = await follow(http, await submit(http, page, {"username": "alice", "password": PASSWORD}))
    assert "Living-room TV" in page.text
    assert "Demo MCP server" in page.text
    assert "Administer" in page.text
    assert "Use the tools" in page.text
    assert "showed you a code" in page.text  # the phishing warning, not a redirect address
    done = await submit(http, page, {"action": "approve"})
    assert done.status_code == 200
    assert "Device connected" in done.text
    assert "Living-room TV" in done.text

    clock.now += 5
    response = await poll(http, client_id, body["device_code"])
    assert response.status_code == 200, response.text
    tokens = response.json()
    assert tokens["scope"] == "mcp:tools mcp:admin"
    assert tokens["refresh_token"]
    keys = jwt.key_set(seeded.state.mcpauth.keys.jwks())
    claims = jwt.verify(tokens["access_token"], keys, issuer=ISSUER, audience=RESOURCE)
    assert claims["client_id"] == client_id
    assert claims["aud"] == RESOURCE
    assert claims["amr"] == ["pwd"]  # how the person signed in on the verification page

    clock.now += 5
    replay = await poll(http, client_id, body["device_code"])
    assert (replay.status_code, error_of(replay)) == (400, "invalid_grant")
    refreshed = await http.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": client_id,
        },
    )
    assert error_of(refreshed) == "invalid_grant"  # the replay revoked the grant


async def test_polling_faster_than_the_interval_slows_the_device_down(
    http: httpx2.AsyncClient, device_client: dict[str, Any], clock: Clock
) -> None:
    client_id = device_client["client_id"]
    device_code = (await start(http, client_id)).json()["device_code"]
    assert error_of(await poll(http, client_id, device_code)) == "authorization_pending"
    clock.now += 4
    fast = await poll(http, client_id, device_code)
    assert (fast.status_code, error_of(fast)) == (400, "slow_down")
    assert "10 seconds" in fast.json()["error_description"]
    clock.now += 9  # the interval is now 10 s, from the last poll
    assert error_of(await poll(http, client_id, device_code)) == "slow_down"
    clock.now += 15
    assert error_of(await poll(http, client_id, device_code)) == "authorization_pending"


async def test_a_denied_request_answers_access_denied(
    http: httpx2.AsyncClient, device_client: dict[str, Any], clock: Clock
) -> None:
    client_id = device_client["client_id"]
    body = (await start(http, client_id)).json()
    page = await approve(http, body["user_code"], action="deny")
    assert page.status_code == 200
    assert "Access not granted" in page.text
    clock.now += 5
    response = await poll(http, client_id, body["device_code"])
    assert (response.status_code, error_of(response)) == (400, "access_denied")


async def test_an_expired_device_code_answers_expired_token_and_is_pruned_later(
    http: httpx2.AsyncClient, device_client: dict[str, Any], seeded: Starlette, clock: Clock
) -> None:
    client_id = device_client["client_id"]
    body = (await start(http, client_id)).json()
    clock.now += 600
    response = await poll(http, client_id, body["device_code"])
    assert (response.status_code, error_of(response)) == (400, "expired_token")
    page = await enter_code(http, body["user_code"])
    assert page.status_code == 400
    assert "expired or was already used" in page.text
    ctx = seeded.state.mcpauth
    assert prune.prune(ctx.db, ctx.settings, ctx.now())["device_authorizations"] == 0
    clock.now += 601
    assert prune.prune(ctx.db, ctx.settings, ctx.now())["device_authorizations"] == 1
    gone = await poll(http, client_id, body["device_code"])
    assert error_of(gone) == "invalid_grant"


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"device_code": None}, "invalid_request"),
        ({"device_code": "not-a-device-code"}, "invalid_grant"),
        ({"resource": "http://127.0.0.1:8001/mcp"}, "invalid_target"),
    ],
)
async def test_bad_polls_get_the_rfc_error(
    http: httpx2.AsyncClient, device_client: dict[str, Any], form: dict[str, Any], error: str
) -> None:
    client_id = device_client["client_id"]
    device_code = (await start(http, client_id)).json()["device_code"]
    data = {"grant_type": DEVICE_CODE, "device_code": device_code, "client_id": client_id}
    data.update(form)
    response = await http.post("/token", data={k: v for k, v in data.items() if v is not None})
    assert (response.status_code, error_of(response)) == (400, error)


async def test_another_client_cannot_poll_the_device_code(
    http: httpx2.AsyncClient, device_client: dict[str, Any]
) -> None:
    device_code = (await start(http, device_client["client_id"])).json()["device_code"]
    other = (
        await http.post(
            "/register",
            json={
                "client_name": "Other",
                "token_endpoint_auth_method": "none",
                "grant_types": [DEVICE_CODE],
            },
        )
    ).json()
    response = await poll(http, other["client_id"], device_code)
    assert error_of(response) == "invalid_grant"


async def test_a_client_without_the_grant_cannot_poll(
    http: httpx2.AsyncClient, public_client: dict[str, Any]
) -> None:
    response = await poll(http, public_client["client_id"], "anything")
    assert error_of(response) == "unauthorized_client"


async def test_pending_requests_are_capped_per_client_and_in_all(
    http: httpx2.AsyncClient, device_client: dict[str, Any]
) -> None:
    for _ in range(3):
        assert (await start(http, device_client["client_id"])).status_code == 200
    refused = await start(http, device_client["client_id"])
    assert (refused.status_code, error_of(refused)) == (429, "too_many_requests")
    assert refused.headers["retry-after"] == "600"
    other = (
        await http.post(
            "/register",
            json={
                "client_name": "Other",
                "token_endpoint_auth_method": "none",
                "grant_types": [DEVICE_CODE],
            },
        )
    ).json()
    for _ in range(2):
        assert (await start(http, other["client_id"])).status_code == 200
    full = await start(http, other["client_id"])
    assert (full.status_code, error_of(full)) == (503, "temporarily_unavailable")
    assert full.headers["retry-after"] == "600"


async def test_the_link_fills_in_the_code_but_checks_nothing(
    http: httpx2.AsyncClient, device_client: dict[str, Any]
) -> None:
    page = await http.get("/device?user_code=bcdf%20ghjk")
    assert forms(page.text)[0].fields["user_code"] == "BCDF-GHJK"
    junk = await http.get("/device?user_code=%3Cscript%3E")
    assert forms(junk.text)[0].fields["user_code"] == ""
    assert "<script>" not in junk.text


async def test_the_code_form_needs_its_csrf_token(
    http: httpx2.AsyncClient, device_client: dict[str, Any]
) -> None:
    await http.get("/device")
    refused = await http.post("/device", data={"user_code": "BCDF-GHJK"})
    assert refused.status_code == 403
    assert "expired" in refused.text
    page = await http.get("/device")
    token = forms(page.text)[0].fields["csrf_token"]
    cross = await http.post(
        "/device",
        data={"user_code": "BCDF-GHJK", "csrf_token": token},
        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    )
    assert cross.status_code == 403
    assert "another website" in cross.text


async def test_a_malformed_code_is_explained_and_not_counted(
    http: httpx2.AsyncClient, device_client: dict[str, Any]
) -> None:
    for _ in range(5):
        page = await enter_code(http, "AEIOU-123")
        assert page.status_code == 400
        assert "8 letters" in page.text
    body = (await start(http, device_client["client_id"])).json()
    assert (await enter_code(http, body["user_code"])).status_code == 303


async def test_wrong_codes_are_throttled_per_address(
    app: Starlette, device_client: dict[str, Any], clock: Clock
) -> None:
    async with (
        transport_from(app, "198.51.100.1") as guesser,
        transport_from(app, "198.51.100.2") as person,
    ):
        body = (await start(person, device_client["client_id"])).json()
        for _ in range(3):
            wrong = await enter_code(guesser, "BBBB-BBBB")
            assert wrong.status_code == 400
            assert "not right" in wrong.text
        locked = await enter_code(guesser, body["user_code"])  # even the right code waits
        assert locked.status_code == 429
        assert "from your network" in locked.text
        assert int(locked.headers["retry-after"]) == 60
        assert (await enter_code(person, body["user_code"])).status_code == 303
        clock.now += 61
        assert (await enter_code(guesser, body["user_code"])).status_code == 303


async def test_wrong_codes_from_many_addresses_are_bounded_in_all(
    app: Starlette, device_client: dict[str, Any]
) -> None:
    for n in range(5):
        async with transport_from(app, f"198.51.100.{10 + n}") as guesser:
            assert (await enter_code(guesser, "CCCC-CCCC")).status_code == 400
    async with transport_from(app, "198.51.100.99") as person:
        body = (await start(person, device_client["client_id"])).json()
        paused = await enter_code(person, body["user_code"])
        assert paused.status_code == 429
        assert "by many people" in paused.text


async def test_a_decided_request_cannot_be_decided_again(
    http: httpx2.AsyncClient, device_client: dict[str, Any]
) -> None:
    body = (await start(http, device_client["client_id"])).json()
    page = await follow(http, await enter_code(http, body["user_code"]))
    page = await follow(http, await submit(http, page, {"username": "alice", "password": PASSWORD}))
    assert (await submit(http, page, {"action": "approve"})).status_code == 200
    again = await enter_code(http, body["user_code"])
    assert again.status_code == 400
    assert "expired or was already used" in again.text


async def test_dpop_binds_the_device_tokens(
    http: httpx2.AsyncClient, device_client: dict[str, Any], clock: Clock
) -> None:
    from mcpauth.client.proofs import DPoPKey

    client_id = device_client["client_id"]
    body = (await start(http, client_id)).json()
    await approve(http, body["user_code"])
    key = DPoPKey.generate()
    proof = key.proof("POST", f"{ISSUER}/token")
    response = await http.post(
        "/token",
        data={
            "grant_type": DEVICE_CODE,
            "device_code": body["device_code"],
            "client_id": client_id,
        },
        headers={"DPoP": proof},
    )
    assert response.status_code == 200, response.text
    assert response.json()["token_type"] == "DPoP"


async def test_registration_takes_the_device_grant_with_refresh_tokens(
    http: httpx2.AsyncClient, seeded: Starlette
) -> None:
    refused = await http.post(
        "/register",
        json={
            "client_name": "x",
            "token_endpoint_auth_method": "none",
            "grant_types": ["refresh_token"],
        },
    )
    assert refused.status_code == 400
    assert "device grant" in refused.json()["error_description"]


async def test_a_user_code_already_taken_is_drawn_again(
    http: httpx2.AsyncClient, device_client: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpauth.server.authorization import device_authorization

    draws = iter(["BCDFGHJK", "BCDFGHJK", "CCCCDDDD"])
    monkeypatch.setattr(device_authorization, "new_user_code", lambda: next(draws))
    first = await start(http, device_client["client_id"])
    second = await start(http, device_client["client_id"])
    assert first.json()["user_code"] == "BCDF-GHJK"
    assert second.status_code == 200, second.text
    assert second.json()["user_code"] == "CCCC-DDDD"  # the taken one was not stored twice
    assert (await enter_code(http, "cccc-dddd")).status_code == 303
