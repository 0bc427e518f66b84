"""The SSRF-safe fetcher (docs/security.md T21, AS-14): special-use addresses are refused after
DNS resolution and before any connection; the checked address is the one connected to."""

from __future__ import annotations

import ipaddress
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from mcpauth.server.clients.ssrf import FetchError, SafeFetcher, forbidden_reason

_real_getaddrinfo = socket.getaddrinfo


@dataclass
class Network:
    """Stand-ins for DNS and TCP: names resolve from ``dns``; every connection attempt is
    recorded and refused, so nothing leaves the test."""

    dns: dict[str, list[list[str]]] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)
    connects: list[tuple[str, int]] = field(default_factory=list)

    def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in self.dns:
            return _real_getaddrinfo(host, port, *args, **kwargs)
        self.lookups.append(name)
        answers = self.dns[name]
        addresses = answers.pop(0) if len(answers) > 1 else answers[0]
        return [
            (
                socket.AF_INET6 if ":" in a else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (a, port, 0, 0) if ":" in a else (a, port),
            )
            for a in addresses
        ]

    def create_connection(self, address: tuple[str, int], *args: Any, **kwargs: Any) -> Any:
        self.connects.append((address[0], address[1]))
        raise ConnectionRefusedError("refused by the test network")


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Network:
    net = Network()
    monkeypatch.setattr(socket, "getaddrinfo", net.getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", net.create_connection)

    def connect(sock: socket.socket, address: Any) -> None:
        net.connects.append((str(address[0]), int(address[1])))
        raise ConnectionRefusedError("refused by the test network")

    monkeypatch.setattr(socket.socket, "connect", connect)
    return net


SSRF_TABLE = [
    ("https://127.0.0.1/client.json", "loopback"),
    ("https://127.1.2.3:8443/client.json", "loopback"),
    ("https://[::1]/client.json", "loopback"),
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://10.0.0.1/client.json", "private"),
    ("https://192.168.1.1/client.json", "private"),
    ("https://172.16.0.1/client.json", "private"),
    ("https://100.64.0.1/client.json", "CGNAT"),
    ("https://0.0.0.0/client.json", "unspecified"),
    ("https://[::]/client.json", "unspecified"),
    ("https://224.0.0.1/client.json", "multicast"),
    ("https://240.0.0.1/client.json", "reserved"),
    ("https://[::ffff:127.0.0.1]/client.json", "loopback, IPv4-mapped"),
    ("https://[::ffff:169.254.169.254]/client.json", "link-local, IPv4-mapped"),
    ("https://[::ffff:10.0.0.1]/client.json", "private, IPv4-mapped"),
    ("https://[::127.0.0.1]/client.json", "IPv4-compatible"),
    ("https://[2002:7f00:1::]/client.json", "loopback, 6to4"),
    ("https://[64:ff9b::a00:1]/client.json", "private, NAT64"),
    ("https://[fe80::1]/client.json", "link-local"),
    ("https://[fd00::1]/client.json", "unique local"),
    ("https://[fec0::1]/client.json", "site-local"),
    ("https://[ff02::1]/client.json", "multicast"),
    ("https://internal.example/client.json", "private"),
    ("https://metadata.example/client.json", "link-local"),
    ("https://localhost.example/client.json", "loopback"),
    ("https://mixed.example/client.json", "loopback"),
    ("https://ula.example/client.json", "unique local"),
]


def _zone(network: Network) -> None:
    network.dns.update(
        {
            "internal.example": [["10.1.2.3"]],
            "metadata.example": [["169.254.169.254"]],
            "localhost.example": [["::ffff:127.0.0.1"]],
            # one bad address among good ones is enough to refuse
            "mixed.example": [["93.184.216.34", "127.0.0.1"]],
            "ula.example": [["2606:4700::1111", "fd12:3456::1"]],
            "public.example": [["93.184.216.34"]],
        }
    )


@pytest.mark.parametrize(("url", "reason"), SSRF_TABLE)
def test_t21_special_use_addresses_are_refused_without_connecting(
    network: Network, url: str, reason: str
) -> None:
    _zone(network)
    with pytest.raises(FetchError, match="special-use address") as caught:
        SafeFetcher().get(url)
    assert reason in caught.value.message
    assert network.connects == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://public.example/client.json", "only https URLs are fetched, not 'http'"),
        ("http://127.0.0.1/client.json", "only https URLs are fetched"),
        ("ftp://public.example/client.json", "not 'ftp'"),
        ("file:///etc/passwd", "not 'file'"),
        ("gopher://127.0.0.1:6379/_INFO", "not 'gopher'"),
        ("https:///client.json", "no host"),
    ],
)
def test_t21_non_https_urls_are_refused_before_resolving_or_connecting(
    network: Network, url: str, message: str
) -> None:
    _zone(network)
    with pytest.raises(FetchError, match=message):
        SafeFetcher().get(url)
    assert network.lookups == []
    assert network.connects == []


def test_t21_the_address_checked_is_the_address_connected_to_so_rebinding_fails(
    network: Network,
) -> None:
    # a rebinding resolver: public on the first answer, loopback on every later one
    network.dns["rebind.example"] = [["93.184.216.34"], ["127.0.0.1"]]
    with pytest.raises(FetchError, match="cannot connect"):
        SafeFetcher().get("https://rebind.example/client.json")
    assert network.lookups == ["rebind.example"]
    assert network.connects == [("93.184.216.34", 443)]


def test_t21_every_resolved_address_is_tried_in_order_after_all_pass(network: Network) -> None:
    network.dns["dual.example"] = [["2606:4700::1111", "93.184.216.34"]]
    with pytest.raises(FetchError, match="cannot connect"):
        SafeFetcher().get("https://dual.example:8443/client.json")
    assert network.connects == [("2606:4700::1111", 8443), ("93.184.216.34", 8443)]


def test_as18_allow_listed_hosts_skip_the_address_check(network: Network) -> None:
    network.dns["intranet.example"] = [["10.1.2.3"]]
    fetcher = SafeFetcher(allow_hosts=["Intranet.Example.", "127.0.0.1"])
    with pytest.raises(FetchError, match="cannot connect"):
        fetcher.get("https://intranet.example/client.json")
    with pytest.raises(FetchError, match="cannot connect"):
        fetcher.get("https://127.0.0.1:8443/client.json")
    assert network.connects == [("10.1.2.3", 443), ("127.0.0.1", 8443)]


def test_as18_allow_listing_is_exact_so_subdomains_stay_guarded(network: Network) -> None:
    network.dns["sub.intranet.example"] = [["10.1.2.3"]]
    with pytest.raises(FetchError, match="special-use"):
        SafeFetcher(allow_hosts=["intranet.example"]).get("https://sub.intranet.example/c")
    assert network.connects == []


@pytest.mark.parametrize("url", ["https://public.example/c", "https://PUBLIC.example./c"])
def test_as18_denied_hosts_are_never_fetched_even_when_allow_listed(
    network: Network, url: str
) -> None:
    _zone(network)
    fetcher = SafeFetcher(allow_hosts=["public.example"], deny_hosts=["public.example"])
    with pytest.raises(FetchError, match="deny list"):
        fetcher.get(url)
    assert network.lookups == []
    assert network.connects == []


def test_t21_unresolvable_names_fail_with_the_resolver_message(network: Network) -> None:
    with pytest.raises(FetchError, match=r"cannot resolve nowhere\.invalid"):
        SafeFetcher().get("https://nowhere.invalid/client.json")
    assert network.connects == []


def test_t21_a_hanging_resolver_counts_against_the_total_timeout(
    network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def hanging(host: Any, *args: Any, **kwargs: Any) -> Any:
        release.wait(5)
        return network.getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    started = time.monotonic()
    try:
        with pytest.raises(FetchError, match=r"resolving slow\.example timed out"):
            SafeFetcher(timeout=0.2).get("https://slow.example/client.json")
    finally:
        release.set()
    assert time.monotonic() - started < 2
    assert network.connects == []


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"],
)
def test_t21_public_unicast_addresses_are_allowed(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A real socket on 127.0.0.1 that would see any connection attempt."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def _pending_connections(sock: socket.socket) -> int:
    count = 0
    while select.select([sock], [], [], 0.05)[0]:
        connection, _ = sock.accept()
        connection.close()
        count += 1
    return count


@pytest.mark.e2e
@pytest.mark.parametrize(
    "template",
    [
        "https://127.0.0.1:{port}/client.json",
        "https://[::ffff:127.0.0.1]:{port}/client.json",
        "https://localhost:{port}/client.json",
        "http://127.0.0.1:{port}/client.json",
    ],
)
def test_t21_a_loopback_listener_never_sees_a_connection(
    listener: socket.socket, template: str
) -> None:
    url = template.format(port=listener.getsockname()[1])
    with pytest.raises(FetchError):
        SafeFetcher().get(url)
    assert _pending_connections(listener) == 0


@pytest.mark.e2e
def test_t21_the_same_listener_is_reached_once_allow_listed(listener: socket.socket) -> None:
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/client.json"
    with pytest.raises(FetchError, match=r"within 0\.3 s"):  # accepted, never answered
        SafeFetcher(allow_hosts=["127.0.0.1"], timeout=0.3).get(url)
    assert _pending_connections(listener) == 1
