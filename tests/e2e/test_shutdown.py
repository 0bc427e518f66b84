"""Graceful shutdown: SIGTERM lets requests already being served finish before the
process exits. Sign-ins are the slow requests here (argon2id at the production cost, for this
server and its user), so several are in flight when the signal arrives."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx2
import pytest

from ..oauth import forms, pkce_pair
from ..support import PRODUCTION_PASSWORD_COST
from .test_authorization_flow import RESOURCE, USERNAME, auth_server

pytestmark = pytest.mark.e2e
IN_FLIGHT = 4


async def _signed_in_pages(
    issuer: str, client_id: str
) -> list[tuple[httpx2.AsyncClient, str, dict[str, str]]]:
    """One browser (its own connection) per sign-in, each at its login form."""
    pages = []
    for _ in range(IN_FLIGHT):
        http = httpx2.AsyncClient(base_url=issuer, timeout=30, follow_redirects=True)
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": "http://127.0.0.1/cb",
            "code_challenge": pkce_pair()[1],
            "code_challenge_method": "S256",
            "resource": RESOURCE,
        }
        page = await http.get("/authorize", params=params)
        form = forms(page.text)[0]
        pages.append((http, str(page.url.join(form.action)), form.fields))
    return pages


def test_sigterm_lets_in_flight_requests_finish(tmp_path: Path) -> None:
    with auth_server(tmp_path, extra_env=PRODUCTION_PASSWORD_COST) as server:
        client = server.add_client(
            "--name", "web", "--redirect-uri", "http://127.0.0.1/cb", "--auth-method", "none"
        )
        process = server.process
        assert process is not None

        async def scenario() -> list[int]:
            pages = await _signed_in_pages(server.issuer, client["client_id"])
            try:
                tasks = [
                    asyncio.create_task(
                        http.post(
                            action,
                            data={**fields, "username": USERNAME, "password": "not the password"},
                        )
                    )
                    for http, action, fields in pages
                ]
                await asyncio.sleep(0.05)  # the requests are on the wire, argon2 is running
                process.send_signal(signal.SIGTERM)
                responses = await asyncio.gather(*tasks)
            finally:
                for http, _, _ in pages:
                    await http.aclose()
            return [r.status_code for r in responses]

        started = time.monotonic()
        statuses = asyncio.run(scenario())
        assert (
            statuses == [200] * IN_FLIGHT
        )  # every in-flight sign-in got its answer (the form again)
        # uvicorn re-raises the signal once it has shut down cleanly
        assert process.wait(timeout=20) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 20
