"""The container, proven: docker/Dockerfile built (tests/e2e/container_images.py: on a base made
with debootstrap where no registry answers) and docker/compose.yaml run with Debian's
docker-compose: PostgreSQL, the authorization server and the protected demo MCP server, published
on 127.0.0.1 only. A person signs in in Chromium and the official MCP Python SDK client calls the
demo tools through the stack, stepping up for the administrative one; the server and the MCP
server run as an unprivileged user on a read-only root filesystem, the server's HEALTHCHECK
reports healthy, and the images carry none of the build's CA certificates. The stack is taken
down with its volume afterwards; the images stay as the build cache of the next session.

The `docker` lane: scripts/ensure-docker.sh installs and starts the engine (CI runs it; the test
runs it too). `MCPAUTH_SKIP_DOCKER=1` says a machine cannot run Docker: the tests skip."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl

from .chromium_opener import CallbackListener, PersonThread, person_in_chromium
from .container_images import DOCKER, EXTRA_CAS, Images, ensure_images, image_size
from .test_clients_in_browser import ChromiumRedirect
from .test_sdk_oauth_client import MemoryStorage, Traffic, claims, mcp_session, text

# the first test's setup builds the images: a cold build is about 3 minutes on 2 cores
pytestmark = [pytest.mark.docker, pytest.mark.anyio, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"
PROJECT = "mcpauth-container-test"
# what docker/compose.yaml publishes: the URLs the tokens name, inside the containers and out
ISSUER = "http://localhost:9000"
RESOURCE = "http://localhost:8000/mcp"
PORTS = (9000, 8000)
SECRET_KEY = "container-test-secret-key-0123456789abcdef"
DEMO_PASSWORD = "container demo password 0123"
DOCKERD_PID = Path("/var/run/docker.pid")
UP_TIMEOUT = 180.0  # seconds for the stack to be healthy after `up`


@dataclass
class Stack:
    images: Images
    compose: list[str]
    env: dict[str, str]
    seconds: dict[str, float] = field(default_factory=dict)

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.compose, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def container(self, service: str) -> str:
        found = self.run("ps", "-q", service).stdout.split()
        assert len(found) == 1, f"{service}: {found}"
        return found[0]

    def inspect(self, service: str) -> dict[str, Any]:
        done = docker_run("inspect", self.container(service))
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout)[0])

    def exec(self, service: str, *command: str) -> subprocess.CompletedProcess[str]:
        return docker_run("exec", self.container(service), *command)

    def logs(self) -> str:
        return self.run("logs", "--no-color", "--tail", "200").stdout


def docker_run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DOCKER, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until_up(stack: Stack) -> None:
    """Until the server's HEALTHCHECK says healthy and the MCP server challenges (bounded)."""
    deadline = time.monotonic() + UP_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        try:
            health = stack.inspect("auth")["State"].get("Health", {}).get("Status", "")
            mcp = httpx2.post(RESOURCE, json={}, timeout=5).status_code
            last = f"auth {health}, mcp {mcp}"
            if health == "healthy" and mcp == 401:
                return
        except (AssertionError, httpx2.HTTPError) as exc:
            last = repr(exc)
        time.sleep(1)
    pytest.fail(f"the stack was not up within {UP_TIMEOUT} s ({last}):\n{stack.logs()}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if os.environ.get("MCPAUTH_SKIP_DOCKER") == "1":
        pytest.skip("no Docker on this machine (MCPAUTH_SKIP_DOCKER=1)")
    seconds: dict[str, float] = {}
    started = time.monotonic()
    engine_was_running = Path(DOCKER).exists() and docker_run("info", timeout=30).returncode == 0
    ensured = subprocess.run(
        [str(ROOT / "scripts" / "ensure-docker.sh")],
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert ensured.returncode == 0, f"scripts/ensure-docker.sh: {ensured.stderr}"
    seconds["ensure-docker"] = time.monotonic() - started
    try:
        yield from _stack(tmp_path_factory, seconds)
    finally:
        if not engine_was_running:  # the dockerd this session started (CI starts its own)
            stop_dockerd()


def stop_dockerd() -> None:
    """Stop the dockerd named by its pid file (TERM, bounded wait); the images stay on disk."""
    pid = int(DOCKERD_PID.read_text().strip())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    raise AssertionError(f"dockerd ({pid}) did not stop within 60 s")


def _stack(tmp_path_factory: pytest.TempPathFactory, seconds: dict[str, float]) -> Iterator[Stack]:
    images = ensure_images()
    seconds |= images.seconds
    legacy = shutil.which("docker-compose")
    assert legacy, "no docker-compose: scripts/ensure-docker.sh installs it"

    tmp_path = tmp_path_factory.mktemp("container")
    # the images just built; the server's own HEALTHCHECK, asked every 2 s instead of 10 s so
    # that the MCP server (which waits for it to be healthy) starts sooner
    override = tmp_path / "compose.images.yaml"
    services: dict[str, dict[str, Any]] = {
        "auth": {"image": images.server, "healthcheck": {"interval": "2s"}},
        "mcp": {"image": images.demo_mcp},
        "postgres": {"image": images.postgres},
    }
    override.write_text(json.dumps({"services": services}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCPAUTH_", "POSTGRES_"))}
    env |= {"MCPAUTH_SECRET_KEY": SECRET_KEY, "MCPAUTH_DEMO_PASSWORD": DEMO_PASSWORD}
    compose = [legacy, "--project-name", PROJECT, "-f", str(COMPOSE_FILE), "-f", str(override)]
    stack = Stack(images, compose, env, seconds)
    stack.run("down", "--volumes", "--remove-orphans", "--timeout", "5")  # an earlier run's
    busy = [port for port in PORTS if port_in_use(port)]
    assert not busy, f"compose.yaml publishes 127.0.0.1:{busy}, which something else holds"
    try:
        started = time.monotonic()
        up = stack.run("up", "--detach", "--no-build", timeout=300)
        assert up.returncode == 0, f"{up.stderr}\n{stack.logs()}"
        wait_until_up(stack)
        seconds["compose up"] = time.monotonic() - started
        print(f"\ncontainer stack timings (s): { {k: round(v, 1) for k, v in seconds.items()} }")
        yield stack
    finally:
        (tmp_path / "compose.log").write_text(stack.logs())
        down = stack.run("down", "--volumes", "--remove-orphans", "--timeout", "10", timeout=180)
        left = docker_run("ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}")
        volumes = docker_run("volume", "ls", "-q", "--filter", f"name={PROJECT}")
        assert down.returncode == 0, down.stderr
        assert left.stdout.split() == [], "containers left behind"
        assert volumes.stdout.split() == [], "volumes left behind"


def demo_user_id(stack: Stack) -> str:
    listed = stack.exec("auth", "mcpauth", "users", "list")
    assert listed.returncode == 0, listed.stderr
    return next(str(u["id"]) for u in json.loads(listed.stdout) if u["username"] == "demo")


# --------------------------------------------------------------------------------------------
# the tests


def test_the_server_and_mcp_server_run_as_non_root_on_a_read_only_root_filesystem(
    stack: Stack,
) -> None:
    for service in ("auth", "mcp"):
        info = stack.inspect(service)
        assert info["Config"]["User"] == "mcpauth:mcpauth", service
        assert info["HostConfig"]["ReadonlyRootfs"] is True, service
        uid = stack.exec(service, "id", "-u")
        assert uid.stdout.strip() == "10001", (service, uid.stderr)
        # the root filesystem refuses a write, even where the user owns the directory
        for target in ("/probe", "/home/mcpauth/probe"):
            write = stack.exec(service, "sh", "-c", f"echo x > {target}")
            assert write.returncode != 0, (service, target)
            assert "Read-only file system" in write.stderr, (service, write.stderr)
        # /tmp is the tmpfs compose gives it
        scratch = stack.exec(service, "sh", "-c", "echo x > /tmp/probe && cat /tmp/probe")
        assert scratch.stdout.strip() == "x", (service, scratch.stderr)


def test_the_healthchecks_report_healthy_and_only_loopback_ports_are_published(
    stack: Stack,
) -> None:
    auth = stack.inspect("auth")
    assert auth["State"]["Health"]["Status"] == "healthy"
    assert "/health" in " ".join(auth["Config"]["Healthcheck"]["Test"])  # the image's own
    assert auth["Config"]["Healthcheck"]["Interval"] == 2 * 10**9
    assert auth["State"]["Health"]["Log"][-1]["ExitCode"] == 0
    assert stack.inspect("postgres")["State"]["Health"]["Status"] == "healthy"
    assert stack.inspect("mcp")["HostConfig"]["NetworkMode"] == f"container:{auth['Id']}"
    bound = auth["NetworkSettings"]["Ports"]
    assert sorted(bound) == ["8000/tcp", "9000/tcp"]
    for port, bindings in bound.items():
        assert bindings == [{"HostIp": "127.0.0.1", "HostPort": port.split("/")[0]}], bindings
    for service in ("postgres", "mcp"):
        assert not any(stack.inspect(service)["NetworkSettings"]["Ports"].values()), service
    response = httpx2.get(f"{ISSUER}/health", timeout=10)
    assert response.status_code == 200, response.text
    metadata = httpx2.get(f"{ISSUER}/.well-known/oauth-authorization-server", timeout=10).json()
    assert metadata["issuer"] == ISSUER


def test_the_images_carry_no_build_certificate_and_stay_small(stack: Stack) -> None:
    extra = [
        "".join(p.read_text().split("-----")[2].split())[:64]
        for p in sorted(EXTRA_CAS.glob("*.crt"))
    ]
    for service in ("auth", "mcp"):
        env = stack.inspect(service)["Config"]["Env"]
        assert not [v for v in env if v.startswith(("PIP_CERT=", "SSL_CERT_FILE="))], env
        bundle = stack.exec(service, "cat", "/etc/ssl/certs/ca-certificates.crt").stdout
        flat = "".join(bundle.split())
        assert not [body for body in extra if body in flat], service
    sizes = {image: image_size(image) for image in (stack.images.server, stack.images.demo_mcp)}
    print(f"\nimage sizes (MB): { {k: round(v / 1e6) for k, v in sizes.items()} }")
    assert all(size < 450e6 for size in sizes.values()), sizes


@pytest.fixture
def chromium_person(stack: Stack) -> Iterator[PersonThread]:
    with person_in_chromium("demo", DEMO_PASSWORD) as person:
        yield person


async def test_a_person_signs_in_in_chromium_and_the_sdk_client_calls_tools_through_the_stack(
    stack: Stack, chromium_person: PersonThread
) -> None:
    listener = CallbackListener()
    redirect = ChromiumRedirect(chromium_person, listener)
    metadata = OAuthClientMetadata(
        client_name="mcpauth container test: official Python SDK client",
        redirect_uris=[AnyUrl(listener.redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    provider = OAuthClientProvider(
        RESOURCE,
        metadata,
        MemoryStorage(),
        redirect_handler=redirect.redirect_handler,
        callback_handler=redirect.callback_handler,
    )
    traffic = Traffic()
    try:
        async with mcp_session(RESOURCE, provider, traffic) as session:
            tools = {tool.name for tool in (await session.list_tools()).tools}
            caller = text(await session.call_tool("whoami", {}))
            total = text(await session.call_tool("add", {"a": 2, "b": 3}))
            reset = text(await session.call_tool("reset_counter", {}))  # needs mcp:admin
    finally:
        listener.close()

    assert {"whoami", "add", "echo", "reset_counter"} <= tools
    assert float(total) == 5
    assert reset == "counter reset"
    # the sign-in went through the server's pages in the browser, then a consent-only step-up
    first, second = redirect.trips
    assert first.pages == ["login", "consent"]
    assert second.pages == ["consent"]
    assert first.problems() == [], first
    assert second.problems() == [], second
    assert first.params["resource"] == RESOURCE
    assert first.params["scope"] == "mcp:tools"
    assert set(second.params["scope"].split()) == {"mcp:tools", "mcp:admin"}
    # the tokens, issued by the server in its container, were accepted by the MCP server in its
    user = demo_user_id(stack)
    client_id = provider.context.client_info.client_id  # type: ignore[union-attr]
    assert caller == f"subject={user} client={client_id} scopes=mcp:tools"
    redeemed = traffic.grants("authorization_code")
    assert [e.status for e in redeemed] == [200, 200]
    token = claims(redeemed[-1].body["access_token"])
    assert (token["iss"], token["aud"], token["sub"]) == (ISSUER, RESOURCE, user)
    assert sorted(token["scope"].split()) == ["mcp:admin", "mcp:tools"]
    assert [e.status for e in traffic.to(f"{ISSUER}/register")] == [201]
