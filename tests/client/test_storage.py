"""Token storage (CL-11, CL-22): memory and file, keyed by issuer + resource + client."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.flow import Authorize
from mcpauth.client.storage import FileStorage, MemoryStorage, TokenKey, default_path
from mcpauth.client.tokens import TokenSet
from tests.client.conftest import Driver, make_flow
from tests.client.fakes import FakeServers

KEY = TokenKey("https://as.example", "https://mcp.example/mcp", "client-1")


@pytest.fixture(params=["memory", "file"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStorage | FileStorage:
    return (
        MemoryStorage()
        if request.param == "memory"
        else FileStorage(tmp_path / "s" / "client.json")
    )


def test_cl22_tokens_round_trip_with_their_absolute_expiry(
    storage: MemoryStorage | FileStorage,
) -> None:
    tokens = TokenSet("a", expires_at=1234.5, refresh_token="r", scope="x y")
    storage.set_tokens(KEY, tokens)
    assert storage.get_tokens(KEY) == tokens
    assert storage.get_tokens(TokenKey(KEY.issuer, KEY.resource, "other")) is None
    storage.delete_tokens(KEY)
    assert storage.get_tokens(KEY) is None


def test_cl11_clients_are_keyed_by_issuer(storage: MemoryStorage | FileStorage) -> None:
    storage.set_client("https://as.example", ClientCredentials("c1", issuer="https://as.example"))
    assert storage.get_client("https://as.example") == ClientCredentials(
        "c1", issuer="https://as.example"
    )
    assert storage.get_client("https://other.example") is None


def test_forget_drops_discovery_and_its_tokens(
    fake: FakeServers, driver: Driver, storage: MemoryStorage | FileStorage
) -> None:
    flow = make_flow(fake, storage)
    driver.run(flow.request_flow())
    assert storage.get_discovery(fake.resource) is not None
    flow.forget()
    assert storage.get_discovery(fake.resource) is None
    assert storage.get_client(fake.base) is not None  # the registration stays


def test_cl22_the_file_is_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "client.json"
    FileStorage(path).set_tokens(KEY, TokenSet("a"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_cl22_a_widened_file_mode_is_narrowed_on_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "client.json"
    storage = FileStorage(path)
    storage.set_tokens(KEY, TokenSet("a"))
    os.chmod(path, 0o644)
    storage.set_tokens(KEY, TokenSet("b"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_corrupt_file_is_treated_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "client.json"
    path.write_text("{not json")
    assert FileStorage(path).get_tokens(KEY) is None
    FileStorage(path).set_tokens(KEY, TokenSet("a"))
    assert json.loads(path.read_text())["version"] == 1


def test_the_default_path_honours_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MCPAUTH_CLIENT_STORE", str(tmp_path / "x.json"))
    assert default_path() == tmp_path / "x.json"
    monkeypatch.delenv("MCPAUTH_CLIENT_STORE")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_path() == tmp_path / "mcpauth" / "client.json"


def test_a_restarted_process_refreshes_instead_of_authorizing_again(
    fake: FakeServers, driver: Driver, tmp_path: Path
) -> None:
    path = tmp_path / "client.json"
    driver.run(make_flow(fake, FileStorage(path)).request_flow())
    fake.now += fake.expires_in + 600  # the process was gone for a while; the token expired
    restarted = make_flow(fake, FileStorage(path))
    driver.run(restarted.request_flow())
    assert sum(isinstance(s, Authorize) for s in driver.steps) == 1
    assert [r["grant_type"] for r in fake.token_requests] == ["authorization_code", "refresh_token"]
    assert len(driver.requests("GET")) == 2  # discovery ran once; the restart used stored metadata


def test_a_restarted_process_uses_a_still_valid_token_without_any_request(
    fake: FakeServers, driver: Driver, tmp_path: Path
) -> None:
    path = tmp_path / "client.json"
    driver.run(make_flow(fake, FileStorage(path)).request_flow())
    before = len(driver.requests())
    driver.run(make_flow(fake, FileStorage(path)).request_flow())
    assert len(driver.requests()) == before


def test_cl22_the_file_holds_no_private_key(tmp_path: Path) -> None:
    from mcpauth import jwt as jose

    key = jose.generate_private_key("ES256")
    path = tmp_path / "client.json"
    FileStorage(path).set_client(
        "i", ClientCredentials("c", auth_method="private_key_jwt", private_key=key)
    )
    assert "PRIVATE" not in path.read_text()
