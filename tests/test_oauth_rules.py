"""The OAuth wire rules every part imports from one place (mcpauth.oauth, mcpauth.uris)."""

from __future__ import annotations

import base64

import pytest

from mcpauth.oauth import (
    MalformedScope,
    basic_authorization,
    format_scope,
    parse_basic_authorization,
    parse_scope,
    s256,
    same_secret,
)
from mcpauth.uris import authorization_server_metadata_urls, secure_or_loopback


def test_s256_is_rfc_7636_appendix_b() -> None:
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert s256(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


@pytest.mark.parametrize(
    ("client_id", "secret"),
    [("plain", "s3cret"), ("a:b", "c d+e%f"), ("ünïcode", "пароль"), ("https://x.example/c", ":")],
)
def test_basic_credentials_round_trip_with_form_encoding(client_id: str, secret: str) -> None:
    header = basic_authorization(client_id, secret)
    assert parse_basic_authorization(header) == (client_id, secret)


@pytest.mark.parametrize(
    ("expected", "presented", "equal"),
    [
        ("a1b2", "a1b2", True),
        ("a1b2", "a1b3", False),
        ("a1b2", "", False),
        ("a1b2", "\u00e9", False),  # hmac.compare_digest on two str raises TypeError here
        ("caf\u00e9", "caf\u00e9", True),
        ("a1b2", "\ud800", False),  # a lone surrogate, as JSON can carry one
        ("\U0001f600", "\U0001f600", True),
    ],
)
def test_same_secret_compares_any_text_without_raising(
    expected: str, presented: str, equal: bool
) -> None:
    assert same_secret(expected, presented) is equal


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer abc",
        "Basic",
        "Basic !!!not-base64!!!",
        "Basic " + b64(b"no-colon"),
        "Basic " + b64(b":secret-without-id"),
        "Basic " + b64(b"\xff\xfe:\xff"),  # not UTF-8
    ],
)
def test_malformed_basic_credentials_are_none(header: str | None) -> None:
    assert parse_basic_authorization(header) is None


def test_basic_decodes_plus_as_space_as_form_encoding_says() -> None:
    assert parse_basic_authorization("basic " + b64(b"my+client:a+b%2Bc")) == ("my client", "a b+c")


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://as.example/x", True),
        ("http://127.0.0.1:9000/x", True),
        ("http://[::1]/x", True),
        ("http://localhost/x", True),
        ("http://as.example/x", False),
        ("https:///nohost", False),
        ("javascript:alert(1)", False),
        ("file:///etc/passwd", False),
        ("http://[::1/broken", False),
    ],
)
def test_https_or_loopback_http(url: str, allowed: bool) -> None:
    assert secure_or_loopback(url) is allowed


def test_metadata_urls_in_the_mcp_order() -> None:
    assert authorization_server_metadata_urls("https://as.example") == [
        "https://as.example/.well-known/oauth-authorization-server",
        "https://as.example/.well-known/openid-configuration",
    ]
    assert authorization_server_metadata_urls("https://as.example/tenant1") == [
        "https://as.example/.well-known/oauth-authorization-server/tenant1",
        "https://as.example/.well-known/openid-configuration/tenant1",
        "https://as.example/tenant1/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize(
    ("value", "scopes"),
    [
        (None, []),
        ("", []),
        ("   ", []),
        ("read", ["read"]),
        ("read  write read", ["read", "write"]),
        (" write read ", ["write", "read"]),
    ],
)
def test_a_scope_string_parses_to_its_tokens_in_order_each_once(
    value: str | None, scopes: list[str]
) -> None:
    assert parse_scope(value) == scopes
    assert parse_scope(value, strict=True) == scopes


def test_the_lenient_scope_parser_reads_any_whitespace() -> None:
    assert parse_scope("read\twrite\nadmin") == ["read", "write", "admin"]


@pytest.mark.parametrize("value", ["read\twrite", 'a"b', "a\\b", "caf\u00e9", "a\x00"])
def test_the_strict_scope_parser_refuses_what_rfc_6749_forbids(value: str) -> None:
    with pytest.raises(MalformedScope):
        parse_scope(value, strict=True)


def test_format_scope_keeps_order_and_drops_repeats() -> None:
    assert format_scope(["b", "a", "b"]) == "b a"
    assert format_scope([]) == ""
