"""Settings precedence (flags > MCPAUTH_* environment > TOML file > defaults) and the issuer
rules (RFC 8414 §2; http only on loopback, AS-23)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import pytest

from mcpauth.errors import ConfigurationError
from mcpauth.server import Settings, create_app
from mcpauth.server import outbound as outbound_module
from mcpauth.server.config import load_settings
from mcpauth.server.crypto import resolve_server_secret
from mcpauth.server.outbound import TrustStore, parse_proxy, trust_store
from mcpauth.server.storage.database import sqlite_file


def test_flags_override_environment_which_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "mcpauth.toml"
    config.write_text('issuer = "https://file.example"\nport = 1111\naccess_token_ttl = 300\n')
    env = {"MCPAUTH_ISSUER": "https://env.example", "MCPAUTH_PORT": "2222"}
    settings = load_settings({"port": 3333}, config_file=config, environ=env)
    assert settings.issuer == "https://env.example"
    assert settings.port == 3333
    assert settings.access_token_ttl == 300


def test_the_issuer_is_kept_byte_for_byte() -> None:
    settings = load_settings({"issuer": "https://Auth.Example/tenant1/"}, environ={})
    assert settings.issuer == "https://Auth.Example/tenant1/"


@pytest.mark.parametrize(
    "issuer",
    [
        "http://auth.example",
        "https://auth.example?x=1",
        "https://auth.example#f",
        "ftp://auth.example",
        "auth.example",
        "https://user@auth.example",
    ],
)
def test_invalid_issuers_are_refused(issuer: str) -> None:
    with pytest.raises(ConfigurationError):
        load_settings({"issuer": issuer}, environ={})


@pytest.mark.parametrize(
    "issuer", ["http://127.0.0.1:9000", "http://localhost:9000", "http://[::1]:9000"]
)
def test_http_issuers_are_allowed_on_loopback(issuer: str) -> None:
    assert load_settings({"issuer": issuer}, environ={}).issuer == issuer


def test_invalid_values_name_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="access_token_ttl"):
        load_settings({"access_token_ttl": 5}, environ={})


def test_embedded_database_generates_a_private_secret_once(tmp_path: Path) -> None:
    path = sqlite_file(f"sqlite:///{tmp_path / 'm.db'}")
    first = resolve_server_secret(None, path)
    assert resolve_server_secret(None, path) == first
    assert (tmp_path / "m.secret").stat().st_mode & 0o777 == 0o600


def test_a_shared_database_requires_a_configured_secret() -> None:
    with pytest.raises(ConfigurationError, match="MCPAUTH_SECRET_KEY"):
        resolve_server_secret(None, sqlite_file("postgresql://u@127.0.0.1/db"))
    with pytest.raises(ConfigurationError, match="MCPAUTH_SECRET_KEY"):
        resolve_server_secret(None, sqlite_file("sqlite:///:memory:"))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("1", True), ("yes", True), ("on", True), ("false", False), ("0", False),
     ("off", False), ("no", False)],
)  # fmt: skip
def test_environment_booleans_follow_the_setting_type(raw: str, expected: bool) -> None:
    environ = {"MCPAUTH_METRICS": raw, "MCPAUTH_OFFLINE_ACCESS": raw, "MCPAUTH_CIMD_ENABLED": raw}
    settings = load_settings(environ=environ)
    assert (settings.metrics, settings.offline_access, settings.cimd_enabled) == (expected,) * 3


def test_an_environment_boolean_that_is_neither_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match=r"^metrics: "):
        load_settings(environ={"MCPAUTH_METRICS": "maybe"})


def test_environment_lists_and_tables_follow_the_setting_type() -> None:
    settings = load_settings(
        environ={
            "MCPAUTH_TRUSTED_PROXIES": " 10.0.0.1, 10.0.0.2 ,",
            "MCPAUTH_CIMD_DENY_HOSTS": "evil.example",
            "MCPAUTH_TRUSTED_IDPS": '{"https://idp.example": "https://idp.example/jwks"}',
        }
    )
    assert settings.trusted_proxies == ("10.0.0.1", "10.0.0.2")
    assert settings.cimd_deny_hosts == ("evil.example",)
    assert settings.trusted_idps == {"https://idp.example": "https://idp.example/jwks"}
    with pytest.raises(ConfigurationError, match="MCPAUTH_TRUSTED_IDPS must be a JSON object"):
        load_settings(environ={"MCPAUTH_TRUSTED_IDPS": "not json"})


def test_the_outbound_proxy_and_ca_file_come_from_the_file_or_the_environment(
    tmp_path: Path,
) -> None:
    config = tmp_path / "mcpauth.toml"
    config.write_text(
        '[mcpauth]\noutbound_proxy = "http://127.0.0.1:3128"\n'
        'outbound_ca_file = "/etc/ssl/corporate.pem"\n'
    )
    settings = load_settings(config_file=config, environ={})
    assert settings.outbound_proxy == "http://127.0.0.1:3128"
    assert settings.outbound_ca_file == "/etc/ssl/corporate.pem"
    env = {"MCPAUTH_OUTBOUND_PROXY": "http://proxy.internal:8080"}
    assert (
        load_settings(config_file=config, environ=env).outbound_proxy
        == env["MCPAUTH_OUTBOUND_PROXY"]
    )


@pytest.mark.parametrize(
    ("proxy", "message"),
    [
        ("https://proxy.example:3128", "must be an http:// URL"),
        ("socks5://proxy.example:1080", "must be an http:// URL"),
        ("http://proxy.example:3128/path", "without a path, query or fragment"),
        ("http://:3128", "must name the proxy's host"),
        ("http://proxy.example:99999", "invalid port"),
    ],
)
def test_an_unusable_outbound_proxy_is_refused_by_name(proxy: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"^outbound_proxy: .*{message}"):
        load_settings(environ={"MCPAUTH_OUTBOUND_PROXY": proxy})


def test_proxy_credentials_are_never_shown_in_the_route() -> None:
    route = parse_proxy("http://user:p%40ss@proxy.example:3128")
    assert route.url == "http://proxy.example:3128"
    assert route.auth == ("user", "p@ss")
    assert "p@ss" not in repr(route)
    assert parse_proxy("http://[::1]").url == "http://[::1]:80"


def test_an_outbound_ca_file_that_cannot_be_loaded_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigurationError, match=r"^outbound_ca_file: cannot load"):
        trust_store(str(missing))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigurationError, match=r"^outbound_ca_file: cannot load"):
        trust_store(str(garbage))


def test_a_bad_outbound_ca_file_still_stops_start_up(
    tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigurationError, match=r"^outbound_ca_file: cannot load"):
        create_app(make_settings(outbound_ca_file=str(garbage)))


def test_the_default_trust_store_is_loaded_by_the_first_fetch_and_then_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded: list[str | None] = []

    def loading(ca_file: str | None) -> ssl.SSLContext:
        loaded.append(ca_file)
        return ssl.create_default_context()

    monkeypatch.setattr(outbound_module, "trust_store", loading)
    store = TrustStore()
    assert loaded == []  # nothing at start
    context = store()
    assert store() is context
    assert loaded == [None]
