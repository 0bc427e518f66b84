"""Upstream providers as configured ([[mcpauth.upstream]] in TOML, MCPAUTH_UPSTREAM in the
environment), their client secrets (an environment variable or a file, never a setting, never
printed), the endpoints their discovery documents name, `mcpauth idps list`, and the
response-size cap on every call to a provider."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcpauth.errors import ConfigurationError
from mcpauth.server import Settings, admin, create_app
from mcpauth.server.config import UpstreamProvider, load_settings
from mcpauth.server.identity.upstream import (
    CappedTransport,
    ProviderMetadata,
    UpstreamUnavailable,
)

from ..readme import readme_block
from ..support import run_cli

TOML = """
[mcpauth]
issuer = "https://auth.example.com"
local_accounts = false

[[mcpauth.upstream]]
id = "corp"
name = "Example Corp"
issuer = "https://login.example.com/tenant-1/v2.0"
client_id = "mcpauth"
client_secret_env = "CORP_SECRET"
allowed_email_domains = ["Example.COM", "@example.org"]
required_claims = { groups = "mcp-users", roles = ["a", "b"] }

[[mcpauth.upstream]]
id = "kc"
name = "Keycloak"
issuer = "http://127.0.0.1:8080/realms/mcp"
client_id = "mcpauth"
client_secret_file = "/run/secrets/kc"
scopes = ["openid", "email"]
"""


def test_providers_come_from_the_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "mcpauth.toml"
    path.write_text(TOML)
    settings = load_settings(config_file=path, environ={})
    corp, kc = settings.upstream
    assert settings.local_accounts is False
    assert corp.allowed_email_domains == ("example.com", "example.org")
    assert corp.required_claims == {"groups": ("mcp-users",), "roles": ("a", "b")}
    assert corp.scopes == ("openid", "email", "profile")
    assert corp.auth_method == "client_secret_basic"
    assert (kc.client_secret_file, kc.scopes) == ("/run/secrets/kc", ("openid", "email"))


def test_providers_come_from_the_environment_as_json() -> None:
    providers = [
        {
            "id": "g",
            "name": "Google",
            "issuer": "https://accounts.google.com",
            "client_id": "x.apps.googleusercontent.com",
            "client_secret_env": "G",
        }
    ]
    settings = load_settings(environ={"MCPAUTH_UPSTREAM": json.dumps(providers)})
    assert settings.upstream[0].issuer == "https://accounts.google.com"
    with pytest.raises(ConfigurationError, match="MCPAUTH_UPSTREAM must be a JSON array"):
        load_settings(environ={"MCPAUTH_UPSTREAM": "g,h"})


BASE = {"id": "idp", "name": "IdP", "issuer": "https://idp.example", "client_id": "c"}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"id": "Has Spaces"}, "upstream.0.id"),
        ({"id": "a" * 33}, "upstream.0.id"),
        ({"issuer": "http://idp.example"}, "loopback"),
        ({"issuer": "https://idp.example/?tenant=1"}, "query"),
        ({"scopes": ["email", "profile"]}, "must include openid"),
        ({"scopes": ["openid", 'bad"scope']}, "not a scope"),
        ({"allowed_email_domains": ["not a domain"]}, "not a domain name"),
        ({"client_secret_env": "A", "client_secret_file": "/f"}, "not both"),
        ({"token_endpoint_auth_method": "client_secret_post"}, "needs a client secret"),
        ({"client_secret": "inline"}, "upstream.0.client_secret"),  # never a setting
        ({"name": ""}, "upstream.0.name"),
    ],
)
def test_a_bad_provider_is_refused_naming_the_setting(change: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        load_settings({"upstream": [{**BASE, **change}]}, environ={})


def test_two_providers_may_not_share_an_id() -> None:
    with pytest.raises(ConfigurationError, match="two providers with the id 'idp'"):
        load_settings({"upstream": [BASE, BASE]}, environ={})


def test_a_secret_comes_from_its_variable_or_file_and_is_never_shown(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("  from-a-file-0123\n")
    by_env = UpstreamProvider(**BASE, client_secret_env="IDP_SECRET")
    by_file = UpstreamProvider(**BASE, client_secret_file=str(secret_file))
    assert by_env.client_secret({"IDP_SECRET": "from-the-environment"}) == "from-the-environment"
    assert by_file.client_secret({}) == "from-a-file-0123"
    assert UpstreamProvider(**BASE).client_secret({}) is None
    assert UpstreamProvider(**BASE).auth_method == "none"  # PKCE only
    with pytest.raises(ConfigurationError, match="IDP_SECRET is not set"):
        by_env.client_secret({})
    with pytest.raises(ConfigurationError, match="cannot read client_secret_file"):
        UpstreamProvider(**BASE, client_secret_file=str(tmp_path / "nope")).client_secret({})
    assert "from-a-file" not in repr(by_file)


def test_serving_refuses_to_start_without_a_provider_s_secret(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCPAUTH_TEST_MISSING_SECRET", raising=False)
    settings = make_settings(
        upstream=[UpstreamProvider(**BASE, client_secret_env="MCPAUTH_TEST_MISSING_SECRET")]
    )
    with pytest.raises(ConfigurationError, match="MCPAUTH_TEST_MISSING_SECRET is not set"):
        create_app(settings)


def test_idps_list_shows_what_to_register_and_never_the_secret(tmp_path: Path) -> None:
    config = tmp_path / "mcpauth.toml"
    config.write_text(TOML.replace('issuer = "https://auth.example.com"\n', ""))
    env = {
        "MCPAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "MCPAUTH_SECRET_KEY": "idps-list-secret-0123456789",
        "MCPAUTH_ISSUER": "https://auth.example.com",
        "MCPAUTH_CONFIG": str(config),
        "CORP_SECRET": "the-corp-client-secret",
    }
    listed = run_cli(["idps", "list"], env=env)
    assert listed.returncode == 0, listed.stderr
    corp, kc = json.loads(listed.stdout)
    assert corp["redirect_uri"] == "https://auth.example.com/upstream/corp/callback"
    assert corp["client_secret"] == "environment variable CORP_SECRET"
    assert corp["client_secret_readable"] is True
    assert kc["client_secret_readable"] is False  # /run/secrets/kc is not there
    assert corp["accounts"] == 0
    assert "the-corp-client-secret" not in listed.stdout + listed.stderr


DISCOVERED = {
    "issuer": "https://idp.example",
    "authorization_endpoint": "https://idp.example/authorize",
    "token_endpoint": "https://idp.example/token",
    "jwks_uri": "https://idp.example/jwks",
    "id_token_signing_alg_values_supported": ["RS256"],
}


def test_a_discovered_configuration_with_usable_endpoints_is_taken() -> None:
    metadata = ProviderMetadata.parse(DISCOVERED, "https://idp.example")
    assert metadata.token_endpoint == "https://idp.example/token"


@pytest.mark.parametrize("member", ["authorization_endpoint", "token_endpoint", "jwks_uri"])
@pytest.mark.parametrize(
    "value",
    [None, 7, "http://idp.example/x", "https://idp.example/x#", "https://u@idp.example/x", "/x"],
)
def test_a_discovered_endpoint_breaking_the_endpoint_rule_is_refused(
    member: str, value: object
) -> None:
    with pytest.raises(UpstreamUnavailable) as refused:
        ProviderMetadata.parse({**DISCOVERED, member: value}, "https://idp.example")
    assert refused.value.reason == f"metadata_{member}"


def test_idps_list_check_reports_an_unreachable_provider(
    make_settings: Callable[..., Settings],
) -> None:
    # its secret's variable is not set here: listing and checking need no secret
    provider = UpstreamProvider(**BASE, client_secret_env="MCPAUTH_TEST_UNSET_SECRET")
    ctx = admin.open_context(make_settings(upstream=[provider]))

    async def down(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    ctx.upstream.transport = httpx2.MockTransport(down)
    (row,) = admin.list_upstream(ctx, check=True)
    assert row["reachable"] == "no: unreachable"
    assert row["client_secret_readable"] is False
    ctx.db.dispose()


# --------------------------------------------------------------------------------------------
# the response-size cap


class Streamed(httpx2.AsyncByteStream):
    """A response body that arrives in chunks, counting how many were read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.read = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read += 1
            yield chunk


class Network(httpx2.AsyncBaseTransport):
    def __init__(self, stream: Streamed, headers: dict[str, str] | None = None) -> None:
        self.stream = stream
        self.headers = headers or {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=self.headers, stream=self.stream)


async def fetch(stream: Streamed, headers: dict[str, str] | None = None) -> bytes:
    transport = CappedTransport(Network(stream, headers), max_bytes=1000)
    async with httpx2.AsyncClient(transport=transport) as client:
        return (await client.get("https://idp.example/jwks")).content


@pytest.mark.anyio
async def test_a_response_within_the_cap_is_read_whole() -> None:
    assert await fetch(Streamed([b"a" * 600, b"b" * 400])) == b"a" * 600 + b"b" * 400
    packed = gzip.compress(b'{"keys": []}')
    assert await fetch(Streamed([packed]), {"content-encoding": "gzip"}) == b'{"keys": []}'


@pytest.mark.anyio
async def test_a_response_past_the_cap_is_refused_without_reading_the_rest() -> None:
    endless = Streamed([b"x" * 400] * 1000)
    with pytest.raises(httpx2.TransportError, match="too large"):
        await fetch(endless)
    assert endless.read == 3
    with pytest.raises(httpx2.TransportError, match="too large"):
        await fetch(Streamed([b"{}"]), {"content-length": "1001"})


@pytest.mark.anyio
async def test_a_compressed_bomb_is_refused_after_the_cap() -> None:
    bomb = gzip.compress(b"\0" * 10_000_000)  # about 10 KB that inflate to 10 MB
    with pytest.raises(httpx2.TransportError, match="too large"):
        await fetch(Streamed([bomb]), {"content-encoding": "gzip"})
    with pytest.raises(httpx2.TransportError, match="content-encoding"):
        await fetch(Streamed([b"..."]), {"content-encoding": "br"})


# --------------------------------------------------------------------------------------------
# the README's examples


@pytest.mark.parametrize(
    "block",
    [readme_block("upstream-config"), readme_block("upstream-google")],
    ids=["upstream-config", "upstream-google"],
)
def test_the_readme_s_provider_examples_are_valid_settings(block: Any, tmp_path: Path) -> None:
    path = tmp_path / "mcpauth.toml"
    path.write_text(block.text)
    settings = load_settings({"issuer": "https://auth.example.com"}, config_file=path, environ={})
    (provider,) = settings.upstream
    assert provider.auth_method == "client_secret_basic"
    assert provider.allowed_email_domains == ("example.com",)
    assert provider.required_claims
