"""Crash safety: `kill -9` of `mcpauth serve` in the middle of a load of
code redemptions and refreshes, on SQLite (WAL) and on PostgreSQL. After a restart on the same
database:

- every refresh token the server acknowledged (a 200 response received) and the client had not
  presented again works exactly once (a 200, then invalid_grant);
- every acknowledged refresh token that was then rotated, and every code that was redeemed, is
  refused;
- a code or refresh token whose request was cut off by the kill (the outcome unknown to the
  client) is accepted at most once overall, and nothing answers with a 5xx.

The counts are printed (run with -s to see them)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest

from .cluster import REDIRECT_URI, add_first_party_client, cluster, replica
from .test_authorization_flow import RESOURCE, AuthServer, Browser

pytestmark = pytest.mark.e2e

KILL_AFTER = 80  # codes redeemed before the kill: the load's progress, not a timer
LOAD_TIMEOUT = 120.0
WORKERS = 8
CODES = 160
VERIFIER = "crash-test-verifier-" + "v" * 40
# every request comes from 127.0.0.1: limits out of reach of the test's volume, but counted (the
# counters are written during the kill too)
LIMITS = {
    "MCPAUTH_RATE_LIMIT_AUTHORIZE": "100000",
    "MCPAUTH_RATE_LIMIT_TOKEN": "100000",
    # strict single use: a refresh token presented again right away is reuse, not a replay
    # within the grace, so the ledger can say "works exactly once" without waiting
    "MCPAUTH_REFRESH_TOKEN_REUSE_GRACE": "0",
}
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _challenge() -> str:
    digest = hashlib.sha256(VERIFIER.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass
class Ledger:
    """What the client saw before the kill."""

    unused_codes: list[str]
    redeemed_codes: list[str] = field(default_factory=list)  # 200 received
    cut_codes: list[str] = field(default_factory=list)  # request in flight at the kill
    parked: list[str] = field(default_factory=list)  # acknowledged, never presented again
    rotated: list[str] = field(default_factory=list)  # acknowledged, then rotated (200)
    cut_refresh: list[str] = field(default_factory=list)  # presented; cut off by the kill
    failures: list[str] = field(default_factory=list)  # any other answer (must stay empty)

    @property
    def acknowledged(self) -> int:
        return len(self.parked) + len(self.rotated) + len(self.cut_refresh)


@pytest.fixture(params=ENGINES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'mcpauth.db'}"
    else:
        yield str(request.getfixturevalue("postgres_url"))


def _authorize_url(server: AuthServer, client_id: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": _challenge(),
        "code_challenge_method": "S256",
        "state": "crash",
        "resource": RESOURCE,
    }
    return f"{server.metadata['authorization_endpoint']}?{urlencode(params)}"


def _code_of(response: httpx2.Response) -> str:
    assert response.status_code in (302, 303), response.text[:300]
    return parse_qs(urlsplit(response.headers["location"]).query)["code"][0]


async def _mint(server: AuthServer, client_id: str, cookies: httpx2.Cookies) -> list[str]:
    """CODES codes from a signed-in browser session (a first-party client: no consent page);
    all of them however slow the machine (each request is bounded by the client's timeout), so
    the load always has codes left after the KILL_AFTER-th redemption."""
    url = _authorize_url(server, client_id)
    codes: list[str] = []

    async def worker(http: httpx2.AsyncClient) -> None:
        while len(codes) < CODES:
            started = await http.get(url)
            codes.append(_code_of(await http.get(started.headers["location"])))

    async with httpx2.AsyncClient(cookies=cookies, timeout=30) as http:
        await asyncio.gather(*(worker(http) for _ in range(4)))
    return codes


def _code_form(client_id: str, code: str) -> dict[str, str]:
    return {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT_URI,
        "code_verifier": VERIFIER,
        "client_id": client_id,
        "resource": RESOURCE,
    }


def _refresh_form(client_id: str, token: str) -> dict[str, str]:
    return {"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id}


async def _load(
    server: AuthServer, client_id: str, process: subprocess.Popen[bytes], ledger: Ledger
) -> float:
    """Redeem codes and refresh their tokens from WORKERS clients until the server is killed
    (once KILL_AFTER codes were redeemed, however fast this machine is); returns the moment of
    the kill."""
    url = server.token_endpoint
    halfway = asyncio.Event()

    async def worker() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            while ledger.unused_codes:
                code = ledger.unused_codes.pop()
                try:
                    redeemed = await http.post(url, data=_code_form(client_id, code))
                except httpx2.TransportError:
                    ledger.cut_codes.append(code)
                    return
                if redeemed.status_code != 200:
                    ledger.failures.append(f"redeem {redeemed.status_code}: {redeemed.text}")
                    return
                ledger.redeemed_codes.append(code)
                if len(ledger.redeemed_codes) >= KILL_AFTER:
                    halfway.set()
                token = redeemed.json()["refresh_token"]
                try:
                    refreshed = await http.post(url, data=_refresh_form(client_id, token))
                except httpx2.TransportError:
                    ledger.cut_refresh.append(token)
                    return
                if refreshed.status_code != 200:
                    ledger.failures.append(f"refresh {refreshed.status_code}: {refreshed.text}")
                    return
                ledger.rotated.append(token)
                ledger.parked.append(refreshed.json()["refresh_token"])

    async def killer() -> float:
        await asyncio.wait_for(halfway.wait(), timeout=LOAD_TIMEOUT)
        os.killpg(process.pid, signal.SIGKILL)
        return time.monotonic()

    tasks = [asyncio.create_task(worker()) for _ in range(WORKERS)]
    killed_at = await killer()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    return killed_at


async def _post_all(url: str, forms: list[dict[str, str]]) -> list[httpx2.Response]:
    limits = httpx2.Limits(max_connections=8)
    async with httpx2.AsyncClient(timeout=30, limits=limits) as http:
        return list(await asyncio.gather(*(http.post(url, data=form) for form in forms)))


def _statuses(responses: list[httpx2.Response]) -> list[tuple[int, str]]:
    out = []
    for response in responses:
        error = response.json().get("error", "") if response.status_code == 400 else ""
        out.append((response.status_code, error))
    return out


def _verify(server: AuthServer, client_id: str, ledger: Ledger) -> dict[str, int]:
    url = server.token_endpoint
    refresh = [_refresh_form(client_id, t) for t in ledger.parked]

    # acknowledged and never presented again: works once, then is a replay
    first = asyncio.run(_post_all(url, refresh))
    assert [r.status_code for r in first] == [200] * len(refresh), _statuses(first)
    second = asyncio.run(_post_all(url, refresh))
    assert _statuses(second) == [(400, "invalid_grant")] * len(refresh)

    # cut off while presented: at most once in all, and never an error of the server
    cut_refresh = [_refresh_form(client_id, t) for t in ledger.cut_refresh]
    outcomes = [asyncio.run(_post_all(url, cut_refresh)) for _ in range(2)]
    for a, b in zip(*outcomes, strict=True):
        assert {a.status_code, b.status_code} <= {200, 400}, (a.text, b.text)
        assert b.status_code == 400, b.text

    # rotated during the load, or redeemed: refused
    rotated = asyncio.run(_post_all(url, [_refresh_form(client_id, t) for t in ledger.rotated]))
    assert _statuses(rotated) == [(400, "invalid_grant")] * len(ledger.rotated)
    codes = [_code_form(client_id, c) for c in ledger.redeemed_codes]
    replayed = asyncio.run(_post_all(url, codes))
    assert _statuses(replayed) == [(400, "invalid_grant")] * len(codes)

    # a code cut off in flight: redeemed at most once, counting the request before the kill
    cut = [_code_form(client_id, c) for c in ledger.cut_codes]
    tries = [asyncio.run(_post_all(url, cut)) for _ in range(2)]
    cut_won = 0
    for a, b in zip(*tries, strict=True):
        assert {a.status_code, b.status_code} <= {200, 400}, (a.text, b.text)
        assert b.status_code == 400, b.text
        cut_won += a.status_code == 200
    return {
        "verified": len(refresh),
        "cut_refresh_accepted_after_restart": sum(r.status_code == 200 for r in outcomes[0]),
        "cut_codes_redeemed_after_restart": cut_won,
    }


def test_kill_9_under_load_loses_no_acknowledged_refresh_token_and_no_code_is_redeemed_twice(
    database: str, tmp_path: Path
) -> None:
    server = cluster(tmp_path, database)
    client_id = add_first_party_client(server)
    engine = "postgresql" if database.startswith("postgresql") else "sqlite"
    with replica(server, extra_env=LIMITS) as process:
        with Browser(server.issuer) as browser:
            response, shown = browser.authorize(_authorize_url(server, client_id))
            assert shown == ["login"]
            _code_of(response)
            codes = asyncio.run(_mint(server, client_id, browser.http.cookies))
        ledger = Ledger(unused_codes=codes)
        started = time.monotonic()
        killed_at = asyncio.run(_load(server, client_id, process, ledger))
        process.wait(timeout=10)
        assert process.returncode == -signal.SIGKILL
    assert not ledger.failures, ledger.failures[:5]
    assert ledger.parked, "no refresh token was acknowledged before the kill"
    assert ledger.unused_codes, "the load ran out of codes before the kill"

    with replica(server, extra_env=LIMITS):
        counts = _verify(server, client_id, ledger)
    print(
        f"\ncrash [{engine}]: killed after {killed_at - started:.1f} s of load; "
        f"codes redeemed {len(ledger.redeemed_codes)}, replays refused "
        f"{len(ledger.redeemed_codes)}; refresh tokens acknowledged {ledger.acknowledged} "
        f"(rotated {len(ledger.rotated)}, unused {len(ledger.parked)}, cut off "
        f"{len(ledger.cut_refresh)}); verified exactly once {counts['verified']}; in flight at "
        f"the kill: {len(ledger.cut_codes)} codes ({counts['cut_codes_redeemed_after_restart']} "
        f"redeemed after restart), {len(ledger.cut_refresh)} refreshes "
        f"({counts['cut_refresh_accepted_after_restart']} accepted after restart)"
    )
