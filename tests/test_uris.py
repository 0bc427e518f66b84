"""Canonical resource URIs (RFC 8707 §2), endpoint and issuer URLs (RFC 8414 §2) and well-known
URL building (RFC 8414 §3.1)."""

from __future__ import annotations

import pytest

from mcpauth import uris
from mcpauth.errors import ConfigurationError
from mcpauth.uris import (
    URIError,
    canonical_resource,
    check_endpoint,
    check_issuer,
    is_loopback_host,
    well_known_url,
)


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("HTTPS://MCP.Example.com/mcp", "https://mcp.example.com/mcp"),
        ("https://mcp.example.com:443/mcp", "https://mcp.example.com/mcp"),
        ("https://mcp.example.com:8443/mcp", "https://mcp.example.com:8443/mcp"),
        ("https://mcp.example.com/", "https://mcp.example.com/"),
        ("https://mcp.example.com", "https://mcp.example.com"),
        ("http://[::1]:8000/Mcp", "http://[::1]:8000/Mcp"),
    ],
)
def test_canonical_resource(given: str, canonical: str) -> None:
    assert canonical_resource(given) == canonical


@pytest.mark.parametrize(
    "bad", ["https://a.example/mcp#frag", "mcp.example.com", "urn:x:y", "https://u@a.example/"]
)
def test_canonical_resource_refuses(bad: str) -> None:
    with pytest.raises(URIError):
        canonical_resource(bad)


@pytest.mark.parametrize(
    ("identifier", "url"),
    [
        ("https://a.example", "https://a.example/.well-known/oauth-authorization-server"),
        ("https://a.example/", "https://a.example/.well-known/oauth-authorization-server"),
        (
            "https://a.example/tenant1",
            "https://a.example/.well-known/oauth-authorization-server/tenant1",
        ),
    ],
)
def test_well_known_url_inserts_the_path(identifier: str, url: str) -> None:
    assert well_known_url(identifier, "oauth-authorization-server") == url


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("[::1]", True),
        ("localhost", True),
        ("10.0.0.1", False),
        ("example.com", False),
        (None, False),
    ],
)
def test_is_loopback_host(host: str | None, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_canonical_forms_are_memoised_for_short_uris_only() -> None:
    uris._canonical_memo.cache_clear()
    assert canonical_resource("HTTPS://MCP.Example.com:443/mcp") == "https://mcp.example.com/mcp"
    assert canonical_resource("HTTPS://MCP.Example.com:443/mcp") == "https://mcp.example.com/mcp"
    long = "https://mcp.example.com/" + "a" * 70_000
    assert canonical_resource(long) == long
    info = uris._canonical_memo.cache_info()
    assert (info.hits, info.currsize) == (1, 1)  # the long one was never stored


@pytest.mark.parametrize(
    "bad",
    [
        "http://[::1/cb",
        "https://[::1",
        "https://[x/y",
        "https://[x]/y",
        "https://xn--zz.example/x",
        "https://\u2603.example/x",
        "http://a.example:99999/",
        "http://a.example:port/",
        "http://a.example:-1/",
    ],
)
def test_parse_url_turns_every_parse_and_idna_error_into_malformed_url(bad: str) -> None:
    with pytest.raises(uris.MalformedURL):
        uris.parse_url(bad)


@pytest.mark.parametrize(
    "good", ["https://b\u00fccher.example/x", "https://xn--bcher-kva.example/x", "http://[::1]:8/"]
)
def test_parse_url_accepts_valid_idna_and_ipv6_hosts(good: str) -> None:
    parts = uris.parse_url(good)
    assert parts.hostname
    assert parts.port in (None, 8)


@pytest.mark.parametrize("bad", ["http://[::1/mcp", "https://xn--zz.example/mcp"])
def test_canonical_resource_refuses_malformed_urls_with_uri_error(bad: str) -> None:
    with pytest.raises(URIError):
        canonical_resource(bad)


@pytest.mark.parametrize(
    ("canonical", "loose"),
    [
        ("https://mcp.example.com/", "https://mcp.example.com"),
        ("https://mcp.example.com", "https://mcp.example.com"),
        ("https://mcp.example.com/mcp/", "https://mcp.example.com/mcp"),
        ("https://mcp.example.com/mcp/?t=1", "https://mcp.example.com/mcp?t=1"),
        ("http://[::1]:8000/Mcp", "http://[::1]:8000/Mcp"),
    ],
)
def test_without_trailing_slash_is_the_form_two_spellings_share(canonical: str, loose: str) -> None:
    assert uris.without_trailing_slash(canonical) == loose


@pytest.mark.parametrize(
    "good",
    [
        "https://idp.example/authorize",
        "https://idp.example/token?tenant=1",
        "http://127.0.0.1:9000/token",
        "http://localhost/authorize",
        "http://[::1]:8080/userinfo",
    ],
)
def test_an_endpoint_is_https_or_loopback_http_and_returned_unchanged(good: str) -> None:
    assert check_endpoint(good, "token_endpoint") == good


@pytest.mark.parametrize(
    ("bad", "rule"),
    [
        ("https://idp.example/token#", "fragment"),
        ("https://idp.example/token#frag", "fragment"),
        ("https://user@idp.example/token", "userinfo"),
        ("https://user:pw@idp.example/token", "userinfo"),
        ("http://idp.example/token", "loopback"),
        ("ftp://idp.example/token", "absolute https URL"),
        ("idp.example/token", "absolute https URL"),
        ("https:///token", "absolute https URL"),
        ("https://[::1/token", "malformed URL"),
    ],
)
def test_an_endpoint_breaking_a_rule_is_refused_naming_it(bad: str, rule: str) -> None:
    with pytest.raises(URIError, match=rf"^token_endpoint\b.*{rule}"):
        check_endpoint(bad, "token_endpoint")


def test_an_endpoint_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(URIError, match="must be a string"):
        check_endpoint(42, "jwks_uri")  # type: ignore[arg-type]


def test_an_issuer_is_an_endpoint_without_a_query() -> None:
    assert check_issuer("https://Auth.Example/tenant1/") == "https://Auth.Example/tenant1/"
    with pytest.raises(ConfigurationError, match="query component"):
        check_issuer("https://auth.example/?tenant=1")
    for endpoint_rule in ("https://auth.example/#f", "https://u@auth.example", "http://a.example"):
        with pytest.raises(ConfigurationError, match=r"^issuer"):
            check_issuer(endpoint_rule)
