"""Failed metadata-document fetches count against the requester's address at both endpoints
that resolve a URL client_id: past the limit an address starts no more fetches (it is told
so at once) while other addresses are unaffected. The fetches fail without any network:
the documents are at special-use addresses, which the fetcher refuses before connecting."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, create_app
from mcpauth.server.clients.fetch_admission import TOO_MANY_FAILURES, FetchLimits

from ..conftest import ISSUER

pytestmark = pytest.mark.anyio
NOT_FETCHED = "the client metadata document could not be fetched"
LIMIT = 3


@pytest.fixture
def limited_app(make_settings: Callable[..., Settings]) -> Starlette:
    app = create_app(make_settings())
    app.state.mcpauth.clients.gate.limits = FetchLimits(failures_per_address=LIMIT)
    return app


@pytest.fixture
async def clients(limited_app: Starlette) -> AsyncIterator[dict[str, httpx2.AsyncClient]]:
    """One HTTP client per requester address."""
    made: dict[str, httpx2.AsyncClient] = {}
    for address in ("192.0.2.1", "192.0.2.2"):
        transport = httpx2.ASGITransport(limited_app, client=(address, 40000))
        made[address] = httpx2.AsyncClient(transport=transport, base_url=ISSUER)
    try:
        yield made
    finally:
        for client in made.values():
            await client.aclose()


async def _authorize(http: httpx2.AsyncClient, client_id: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": "http://127.0.0.1/callback",
        "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        "code_challenge_method": "S256",
    }
    response = await http.get("/authorize", params=params)
    assert response.status_code == 400, response.text
    assert "invalid_client" in response.text
    return response.text


async def _token(http: httpx2.AsyncClient, client_id: str) -> str:
    form = {"grant_type": "refresh_token", "refresh_token": "r", "client_id": client_id}
    response = await http.post("/token", data=form)
    assert response.status_code == 401, response.text
    assert response.json()["error"] == "invalid_client"
    return str(response.json()["error_description"])


@pytest.mark.parametrize("endpoint", [_authorize, _token], ids=["authorize", "token"])
async def test_an_address_whose_document_fetches_fail_is_refused_further_fetches(
    clients: dict[str, httpx2.AsyncClient],
    endpoint: Callable[[httpx2.AsyncClient, str], Any],
) -> None:
    first, other = clients["192.0.2.1"], clients["192.0.2.2"]
    for n in range(LIMIT):
        text = await endpoint(first, f"https://10.0.0.{n + 1}/client.json")
        assert NOT_FETCHED in text
        assert "10.0.0" not in text.replace(f"https://10.0.0.{n + 1}/client.json", "")
        assert "special-use" not in text  # not an oracle: why it failed stays in the log
    assert TOO_MANY_FAILURES in await endpoint(first, "https://10.0.0.99/client.json")
    assert NOT_FETCHED in await endpoint(other, "https://10.0.0.99/client.json")
