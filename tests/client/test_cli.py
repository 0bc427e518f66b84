"""``mcpauth login | token | logout`` in process and as real processes."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from mcpauth.client import callback as callback_module
from mcpauth.client.cli import (
    EXIT_DISCOVERY_FAILED,
    EXIT_LOGIN_REQUIRED,
    EXIT_REFUSED,
    add_client_parsers,
)
from mcpauth.dpop import check_proof
from tests.client.fakes import FakeServers, serve

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="mcpauth")
    add_client_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


@pytest.fixture
def served(fake: FakeServers) -> Iterator[FakeServers]:
    with serve(fake.app()) as base:
        fake.base = base
        yield fake


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []

    def open_url(url: str) -> bool:
        opened.append(url)
        httpx2.get(url, follow_redirects=True, timeout=10)
        return True

    monkeypatch.setattr(callback_module.webbrowser, "open", open_url)
    return opened


def test_login_then_token_prints_the_stored_token(
    served: FakeServers, browser: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "client.json")
    assert run("login", served.resource, "--store", store, "--timeout", "10") == 0
    assert len(browser) == 1
    assert "Open this URL" in capsys.readouterr().err
    assert run("token", served.resource, "--store", store) == 0
    token = capsys.readouterr().out.strip()
    assert token in served.tokens
    assert len(served.authorize_requests) == 1


# what reading a stored token has no use for (the HTTP clients, pydantic, the JOSE stack, the
# other parts): `mcpauth token` is run by scripts before every request and should start fast
NOT_FOR_A_STORED_TOKEN = (
    "httpx",
    "httpx2",
    "anyio",
    "pydantic",
    "jwt",
    "cryptography",
    "mcpauth.metadata",
    "mcpauth.middleware",
    "mcpauth.proxy",
    "mcpauth.server",
)
IMPORTS = (
    "import sys\n"
    "from mcpauth.cli import main\n"
    "code = main(sys.argv[1:])\n"
    f"print(' '.join(m for m in {NOT_FOR_A_STORED_TOKEN!r} if m in sys.modules), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def test_a_stored_token_is_printed_without_loading_what_a_refresh_would_need(
    served: FakeServers, browser: list[str], tmp_path: Path
) -> None:
    served.now = time.time()  # the process uses the real clock
    store = str(tmp_path / "client.json")
    assert run("login", served.resource, "--store", store, "--timeout", "10") == 0
    asked = len(served.token_requests)
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS, "token", served.resource, "--store", store],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in served.tokens
    assert done.stderr.strip() == ""  # none of them was imported
    assert len(served.token_requests) == asked  # the stored token, not a new one


def test_token_without_login_exits_with_login_required(
    served: FakeServers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("token", served.resource, "--store", str(tmp_path / "c.json")) == EXIT_LOGIN_REQUIRED
    assert capsys.readouterr().out == ""
    assert served.authorize_requests == []


def test_logout_forgets_the_tokens(served: FakeServers, browser: list[str], tmp_path: Path) -> None:
    store = str(tmp_path / "client.json")
    assert run("login", served.resource, "--store", store, "--timeout", "10") == 0
    assert run("logout", served.resource, "--store", store) == 0
    assert run("token", served.resource, "--store", store) == EXIT_LOGIN_REQUIRED


def test_a_server_without_a_usable_authorization_server_exits_with_discovery_failed(
    served: FakeServers, tmp_path: Path
) -> None:
    served.metadata = lambda: {"issuer": "https://elsewhere.example"}  # type: ignore[method-assign]
    code = run("login", served.resource, "--store", str(tmp_path / "c.json"), "--no-browser")
    assert code == EXIT_DISCOVERY_FAILED


def test_client_credentials_from_the_command_line(
    served: FakeServers,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SVC_SECRET", "s3cret")
    store = str(tmp_path / "c.json")
    args = [
        "--store",
        store,
        "--client-id",
        "svc",
        "--client-secret-env",
        "SVC_SECRET",
        "--client-credentials",
    ]
    assert run("token", served.resource, *args) == 0
    assert capsys.readouterr().out.strip() in served.tokens
    assert served.token_requests[0]["grant_type"] == "client_credentials"


def machine(store: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("SVC_SECRET", "s3cret")
    return ["--store", store, "--client-id", "svc", "--client-secret-env", "SVC_SECRET"]


def test_token_dpop_prints_the_header_lines_of_one_request(
    served: FakeServers,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served.dpop_algs = ["ES256"]
    args = [*machine(str(tmp_path / "c.json"), monkeypatch), "--client-credentials", "--dpop"]
    other = f"{served.base}/other/path"
    assert run("token", served.resource, *args, "--method", "get", "--url", other,
               "--nonce", "rs-nonce") == 0  # fmt: skip
    authorization, proof = capsys.readouterr().out.splitlines()
    scheme, token = authorization.removeprefix("Authorization: ").split(" ")
    assert scheme == "DPoP"
    issued = served.tokens[token]
    assert issued.jkt is not None
    checked = check_proof(
        [proof.removeprefix("DPoP: ")],
        method="GET",
        url=other,
        access_token=token,
        nonce="rs-nonce",
        jkt=issued.jkt,
    )
    assert checked.jkt == issued.jkt
    # the defaults are a POST to the server's URL: the fake takes the two lines as they are
    assert run("token", served.resource, *args) == 0
    headers = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert httpx2.post(served.resource, json=ping, headers=headers).status_code == 200
    assert len(served.token_requests) == 1  # the stored bound token, its key from the store
    # a bound token is never printed alone
    assert run("token", served.resource, *args[:-1]) == EXIT_REFUSED
    assert capsys.readouterr().out == ""


def test_token_dpop_refuses_a_server_without_dpop(
    served: FakeServers,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [*machine(str(tmp_path / "c.json"), monkeypatch), "--client-credentials", "--dpop"]
    assert run("token", served.resource, *args) == EXIT_REFUSED
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "does not offer DPoP" in captured.err
    assert served.token_requests == []


def test_a_workload_token_file_is_the_assertion(
    served: FakeServers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("platform-issued.jwt\n")
    store = str(tmp_path / "c.json")
    assert run("token", served.resource, "--store", store, "--workload-token-file",
               str(token_file)) == 0  # fmt: skip
    assert capsys.readouterr().out.strip() in served.tokens
    (request,) = served.token_requests
    assert request["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert request["assertion"] == "platform-issued.jwt"
    assert request["authorization"] == ""  # no client secret anywhere
    assert "client_id" not in request  # the platform token names the workload


CLI = (
    "import argparse, sys\n"
    "from mcpauth.client.cli import add_client_parsers\n"
    "p = argparse.ArgumentParser(prog='mcpauth')\n"
    "add_client_parsers(p.add_subparsers(dest='command', required=True))\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.handler(a))\n"
)


def cli_process(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=ROOT,
        check=False,
    )


def test_processes_log_in_then_refresh_after_a_restart(served: FakeServers, tmp_path: Path) -> None:
    served.now = time.time()  # the processes use the real clock
    served.expires_in = 30  # inside the 60 s refresh margin: the next process must refresh
    env = {
        **os.environ,
        "BROWSER": f"{sys.executable} {ROOT / 'tests' / 'client' / 'browser.py'} %s",
        "MCPAUTH_CLIENT_STORE": str(tmp_path / "client.json"),
        "PYTHONPATH": str(ROOT),
    }
    login = cli_process("login", served.resource, "--timeout", "20", env=env)
    assert login.returncode == 0, login.stderr
    assert "access-" not in login.stderr + login.stdout  # tokens never reach the terminal log
    token = cli_process("token", served.resource, env=env)
    assert token.returncode == 0, token.stderr
    assert token.stdout.strip() in served.tokens
    assert len(served.authorize_requests) == 1
    assert [r["grant_type"] for r in served.token_requests] == [
        "authorization_code",
        "refresh_token",
    ]
