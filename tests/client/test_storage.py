"""Token storage (CL-11, CL-22): memory and file, keyed by issuer + resource + client; the file's
lock between processes, and file I/O kept off the event loop."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import anyio.to_thread
import httpx2
import pytest
from pydantic import ValidationError

from mcpauth.client import CallableRedirectHandler, OAuth, Policy
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.flow import Authorize
from mcpauth.client.storage import (
    FileStorage,
    MemoryStorage,
    TokenKey,
    TokenStorage,
    default_path,
)
from mcpauth.client.tokens import TokenSet
from tests.client.conftest import Driver, _SyncASGI, follow, make_flow
from tests.client.fakes import FakeServers

ROOT = Path(__file__).resolve().parents[2]

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


def test_a_stored_discovery_is_checked_when_its_metadata_is_first_used(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path / "client.json")
    with storage._edit() as document:
        document["discovery"]["https://mcp.example/mcp"] = {
            "resource": "https://mcp.example/mcp",
            "issuer": "https://as.example",
            "metadata": {"token_endpoint": "https://as.example/token"},  # no issuer
            "protected_resource": None,
        }
    found = storage.get_discovery("https://mcp.example/mcp")
    assert found is not None
    assert (found.issuer, found.resource) == ("https://as.example", "https://mcp.example/mcp")
    assert found.protected_resource is None
    with pytest.raises(ValidationError):
        found.metadata  # noqa: B018


def test_a_stored_discovery_reads_back_equal_and_stays_immutable(
    fake: FakeServers, driver: Driver, tmp_path: Path
) -> None:
    storage = FileStorage(tmp_path / "client.json")
    flow = make_flow(fake, storage)
    driver.run(flow.request_flow())
    stored = storage.get_discovery(fake.resource)
    assert flow.discovery is not None
    assert stored == flow.discovery
    assert stored.metadata == flow.discovery.metadata
    assert stored.protected_resource == flow.discovery.protected_resource
    with pytest.raises(AttributeError):
        stored.issuer = "https://evil.example"  # type: ignore[misc]


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


def test_cl22_the_lock_file_is_private_too(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path / "client.json")
    storage.set_tokens(KEY, TokenSet("a"))
    assert stat.S_IMODE(storage.lock_path.stat().st_mode) == 0o600


# -- two processes, one file ------------------------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from mcpauth.client.storage import FileStorage, TokenKey
from mcpauth.client.tokens import TokenSet

path, name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
storage = FileStorage(path)
(path.parent / f"{name}.ready").touch()
for _ in range(6000):  # both start writing together
    if (path.parent / "go").exists():
        break
    time.sleep(0.005)
for i in range(count):
    client = f"{name}-{i}"
    storage.set_tokens(TokenKey("https://as.example", "https://mcp.example/mcp", client),
                       TokenSet(client))
"""

PROBE = """
import sys
from filelock import FileLock, Timeout

try:
    with FileLock(sys.argv[1], timeout=0):
        print("free")
except Timeout:
    print("busy")
"""


def python_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "client.json"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, "100"], env=python_env(), cwd=tmp_path
        )
        for name in ("first", "second")
    ]
    try:
        for _ in range(3000):
            if all((tmp_path / f"{name}.ready").exists() for name in ("first", "second")):
                break
            if any(writer.poll() is not None for writer in writers):
                break
            time.sleep(0.01)
        (tmp_path / "go").touch()
        assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
    stored = json.loads(path.read_text())["tokens"]
    assert len(stored) == 200  # every read-modify-write saw the one before it
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_another_process_sees_the_lock_held_while_the_file_is_edited(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path / "client.json")

    def probe() -> str:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(storage.lock_path)],
            env=python_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.strip()

    with storage._edit() as document:
        document["tokens"]["k"] = TokenSet("a").to_json()
        assert probe() == "busy"
    assert probe() == "free"


HOLDER = """
import sys
from filelock import FileLock

with FileLock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.mark.skipif(os.name != "posix", reason="on Windows a read takes the lock too")
def test_a_read_needs_no_lock_since_a_write_replaces_the_whole_file(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path / "client.json")
    storage.set_tokens(KEY, TokenSet("a"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(storage.lock_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "held"  # another process is editing
        read: list[TokenSet | None] = []
        reader = threading.Thread(target=lambda: read.append(storage.get_tokens(KEY)))
        reader.start()
        reader.join(timeout=30)
        assert read == [TokenSet("a")]  # read at once, not after the edit
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


# -- storage and the event loop ---------------------------------------------------------------


class SlowFileStorage(FileStorage):
    """Its token write waits until the test lets it go, and notes the thread it ran on."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writing = threading.Event()
        self.go_on = threading.Event()
        self.threads: set[int] = set()

    def set_tokens(self, key: TokenKey, tokens: TokenSet) -> None:
        self.threads.add(threading.get_ident())
        self.writing.set()
        if not self.go_on.wait(timeout=20):
            raise AssertionError("nothing on the event loop ran while the token was written")
        super().set_tokens(key, tokens)


class ThreadNotingMemoryStorage(MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def set_tokens(self, key: TokenKey, tokens: TokenSet) -> None:
        self.threads.add(threading.get_ident())
        super().set_tokens(key, tokens)


def async_oauth(fake: FakeServers, user: httpx2.Client, storage: TokenStorage) -> OAuth:
    return OAuth(
        fake.resource,
        storage=storage,
        redirect_handler=CallableRedirectHandler("http://127.0.0.1:9999/callback", follow(user)),
        policy=Policy(clock=fake.clock),
    )


@pytest.mark.anyio
async def test_file_storage_is_written_off_the_event_loop_while_it_keeps_serving(
    fake: FakeServers, tmp_path: Path
) -> None:
    storage = SlowFileStorage(tmp_path / "client.json")
    served_meanwhile: list[str] = []

    async def let_the_write_finish() -> None:
        await anyio.to_thread.run_sync(storage.writing.wait, 20)
        served_meanwhile.append("ran while the write waited")  # on the loop
        storage.go_on.set()

    with httpx2.Client(transport=_SyncASGI(fake), base_url=fake.base) as user:
        transport = httpx2.ASGITransport(app=fake.app())
        async with (
            httpx2.AsyncClient(
                transport=transport, auth=async_oauth(fake, user, storage)
            ) as client,
            anyio.create_task_group() as group,
        ):
            group.start_soon(let_the_write_finish)
            response = await client.post(fake.resource, json={})
    assert response.status_code == 200
    assert served_meanwhile == ["ran while the write waited"]
    assert threading.get_ident() not in storage.threads
    assert len(json.loads(storage.path.read_text())["tokens"]) == 1


@pytest.mark.anyio
async def test_memory_storage_is_used_on_the_event_loop(fake: FakeServers) -> None:
    storage = ThreadNotingMemoryStorage()
    with httpx2.Client(transport=_SyncASGI(fake), base_url=fake.base) as user:
        transport = httpx2.ASGITransport(app=fake.app())
        auth = async_oauth(fake, user, storage)
        async with httpx2.AsyncClient(transport=transport, auth=auth) as client:
            assert (await client.post(fake.resource, json={})).status_code == 200
    assert storage.threads == {threading.get_ident()}
