"""The metadata documents real MCP clients publish, fetched the way a server behind an
organisation's egress proxy fetches them: through ``outbound_proxy`` (a TLS-intercepting
forward proxy on 127.0.0.1, :mod:`.forward_proxy`) trusting ``outbound_ca_file`` (its CA). Each
document resolves, its authentication method is negotiated (SEP-3149), and an authorization
request with its URL as ``client_id`` reaches the sign-in page and, signed in, the consent page.
The same route carries the trusted issuers' key sets and the upstream providers' discovery.
Without the CA, or without a reachable proxy, the fetch fails with a precise error, never a
500 (AS-14, docs/security.md T21)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, admin, create_app
from mcpauth.server.clients.metadata_documents import (
    fetcher_for,
    resolve_client_metadata_document,
)
from mcpauth.server.clients.ssrf import FetchError
from mcpauth.server.config import UpstreamProvider
from mcpauth.server.context import trusted_key_sets
from mcpauth.server.identity.trusted_issuers import IdentityProviders
from mcpauth.server.identity.upstream import UpstreamProviders
from mcpauth.server.outbound import outbound_for

from ..conftest import ISSUER
from ..oauth import authorization_params, follow, forms, pkce_pair, query, submit
from ..support import free_port
from .forward_proxy import ForwardProxy, forward_proxy, host_of

pytestmark = pytest.mark.e2e
RESOURCE = "http://127.0.0.1:8000/mcp"
CODE = ["authorization_code", "refresh_token"]
CODEX_ID = "k3v9q2m7x4ab"  # made up: Codex mints one id per target server (12 characters)

# Claude Code's, ChatGPT's and VS Code's documents are as those clients published them
# (fetched 2026-09-08); the others are reconstructions from what is known of each client
# (the client catalogue: name, redirect URIs, grants, authentication method), marked so.
DOCUMENTS: dict[str, dict[str, Any]] = {
    "Claude": {  # reconstruction
        "client_id": "https://claude.ai/oauth/mcp-oauth-client-metadata",
        "client_name": "Claude",
        "client_uri": "https://claude.ai",
        "redirect_uris": [
            "https://claude.ai/api/mcp/auth_callback",
            "https://claude.com/api/mcp/auth_callback",
        ],
        "grant_types": CODE,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    },
    "Claude Code": {
        "client_id": "https://claude.ai/oauth/claude-code-client-metadata",
        "client_name": "Claude Code",
        "client_uri": "https://claude.ai",
        "redirect_uris": ["http://localhost/callback", "http://127.0.0.1/callback"],
        "grant_types": CODE,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    },
    "ChatGPT": {
        "client_id": "https://chatgpt.com/oauth/client.json",
        "client_uri": "https://chatgpt.com/",
        "redirect_uris": ["https://chatgpt.com/connector_platform_oauth_redirect"],
        "token_endpoint_auth_method": "private_key_jwt",
        "token_endpoint_auth_methods_supported": ["none", "private_key_jwt"],
        "grant_types": CODE,
        "response_types": ["code"],
        "client_name": "ChatGPT",
        "logo_uri": "https://persistent.oaistatic.com/sonic/misc/openai-logo.png",
        "token_endpoint_auth_signing_alg": "RS256",
        "jwks_uri": "https://chatgpt.com/oauth/jwks.json",
    },
    "VS Code": {
        "client_name": "Visual Studio Code",
        "logo_uri": "https://code.visualstudio.com/assets/branding/code-stable.png",
        "grant_types": [*CODE, "urn:ietf:params:oauth:grant-type:device_code"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "native",
        "client_id": "https://vscode.dev/oauth/client-metadata.json",
        "client_uri": "https://vscode.dev/product",
        "redirect_uris": ["http://127.0.0.1:33418/", "https://vscode.dev/redirect"],
    },
    "Zed": {  # reconstruction
        "client_id": "https://zed.dev/oauth/client-metadata.json",
        "client_name": "Zed",
        "client_uri": "https://zed.dev",
        "redirect_uris": ["http://127.0.0.1/callback"],
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    },
    "Goose": {  # reconstruction
        "client_id": "https://goose-docs.ai/oauth/client-metadata.json",
        "client_name": "goose",
        "client_uri": "https://goose-docs.ai",
        "redirect_uris": ["http://127.0.0.1/oauth_callback"],
        "grant_types": CODE,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "native",
    },
    "opencode": {  # reconstruction: no application_type, like its registrations
        "client_id": "https://opencode.ai/oauth/opencode/client.json",
        "client_name": "opencode",
        "client_uri": "https://opencode.ai",
        "redirect_uris": ["http://127.0.0.1/callback", "http://localhost/callback"],
        "grant_types": CODE,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    },
    "Codex": {  # reconstruction
        "client_id": f"https://chatgpt.com/oauth/codex/{CODEX_ID}/client.json",
        "client_name": "Codex",
        "redirect_uris": [f"http://127.0.0.1/callback/{CODEX_ID}"],
        "grant_types": CODE,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "native",
    },
}
METHODS = {name: "none" for name in DOCUMENTS} | {"ChatGPT": "private_key_jwt"}
SECRETS_ONLY = "https://mcp-client.example.com/oauth/client.json"
IDP = "https://idp.example.com"
UPSTREAM = "https://login.example.com"
PUBLIC_JWK = {
    "kty": "EC",
    "crv": "P-256",
    "kid": "idp-1",
    "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
    "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
}
SERVED: dict[str, Any] = {
    **{doc["client_id"]: doc for doc in DOCUMENTS.values()},
    SECRETS_ONLY: {
        "client_id": SECRETS_ONLY,
        "client_name": "Secret Keeper",
        "redirect_uris": ["http://127.0.0.1/callback"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
    },
    f"{IDP}/jwks.json": {"keys": [PUBLIC_JWK]},
    f"{UPSTREAM}/.well-known/openid-configuration": {
        "issuer": UPSTREAM,
        "authorization_endpoint": f"{UPSTREAM}/authorize",
        "token_endpoint": f"{UPSTREAM}/token",
        "jwks_uri": f"{UPSTREAM}/jwks",
        "id_token_signing_alg_values_supported": ["ES256"],
        "code_challenge_methods_supported": ["S256"],
    },
}
HOSTS = sorted({host_of(url) for url in SERVED} | {"localhost"})


@pytest.fixture(scope="module")
def module_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    with forward_proxy(tmp_path_factory.mktemp("proxy-tls"), HOSTS) as running:
        running.documents.update(SERVED)
        yield running


@pytest.fixture
def proxy(module_proxy: ForwardProxy) -> ForwardProxy:
    module_proxy.clear()
    return module_proxy


@pytest.fixture
def proxied(make_settings: Callable[..., Settings], proxy: ForwardProxy) -> Settings:
    return make_settings(outbound_proxy=proxy.url, outbound_ca_file=str(proxy.ca_file))


@pytest.fixture
def proxied_app(proxied: Settings) -> Starlette:
    app = create_app(proxied)
    ctx = app.state.mcpauth
    admin.add_user(ctx, "alice", "correct horse battery")
    admin.add_resource(
        ctx, RESOURCE, scopes=["mcp:tools"], default_scopes=["mcp:tools"], is_default=True
    )
    return app


@pytest.fixture
async def http(proxied_app: Starlette) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(proxied_app)
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as client:
        yield client


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_each_clients_document_resolves_through_the_proxy(
    proxied: Settings, proxy: ForwardProxy, name: str
) -> None:
    document = DOCUMENTS[name]
    url = document["client_id"]
    client = resolve_client_metadata_document(proxied, url, fetcher=fetcher_for(proxied))
    assert client.client_name == document["client_name"]
    assert client.redirect_uris == document["redirect_uris"]
    assert client.token_endpoint_auth_method == METHODS[name]  # SEP-3149 for ChatGPT
    assert client.grant_types == document["grant_types"]  # VS Code's device grant too
    assert proxy.tunnels == [f"{host_of(url)}:443"]  # CONNECT, then TLS inside the tunnel
    assert proxy.served == [url]


def _requests(name: str) -> list[str]:
    """The redirect URIs to ask with: the document's first, and for a port-less loopback
    one the same with an ephemeral port, as the client sends it (RFC 8252 §7.3)."""
    first = DOCUMENTS[name]["redirect_uris"][0]
    for loopback in ("http://127.0.0.1/", "http://localhost/"):
        if first.startswith(loopback):
            return [first, first.replace(loopback[:-1], loopback[:-1] + ":53682", 1)]
    return [first]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "redirect_uri"), [(name, uri) for name in sorted(DOCUMENTS) for uri in _requests(name)]
)
async def test_each_client_signs_in_consents_and_gets_its_tokens(
    http: httpx2.AsyncClient, proxy: ForwardProxy, name: str, redirect_uri: str
) -> None:
    client_id = DOCUMENTS[name]["client_id"]
    verifier, challenge = pkce_pair()
    params = authorization_params(
        client_id, challenge, redirect_uri=redirect_uri, resource=RESOURCE
    )
    sign_in = await follow(http, await http.get("/authorize?" + urlencode(params)))
    assert sign_in.status_code == 200, sign_in.text
    assert "password" in forms(sign_in.text)[0].fields
    values = {"username": "alice", "password": "correct horse battery"}
    consent = await follow(http, await submit(http, sign_in, values))
    assert consent.status_code == 200, consent.text
    assert host_of(client_id) in consent.text  # AS-17: the document's host is shown
    assert any("approve" in form.buttons.get("action", []) for form in forms(consent.text))
    assert proxy.served == [client_id]
    if METHODS[name] != "none":
        return  # ChatGPT signs its token requests with its own key (private_key_jwt)
    # the rest of the client's way: the code for a token for the MCP server, then a refresh
    back = await submit(http, consent, {"action": "approve"})
    assert back.headers["location"].startswith(redirect_uri + "?"), back.headers["location"]
    code = query(back.headers["location"])["code"]
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
            "code_verifier": verifier, "client_id": client_id, "resource": RESOURCE}  # fmt: skip
    issued = await http.post("/token", data=form)
    assert issued.status_code == 200, issued.text
    assert issued.json()["scope"] == "mcp:tools"
    if "refresh_token" not in DOCUMENTS[name]["grant_types"]:
        assert "refresh_token" not in issued.json()  # Zed's document asks for codes only
        return
    form = {"grant_type": "refresh_token", "refresh_token": issued.json()["refresh_token"],
            "client_id": client_id}  # fmt: skip
    refreshed = await http.post("/token", data=form)
    assert refreshed.status_code == 200, refreshed.text
    assert proxy.served == [client_id]  # the document was cached, not fetched again


@pytest.mark.anyio
async def test_no_authentication_method_in_common_is_an_invalid_client_metadata_page(
    http: httpx2.AsyncClient,
) -> None:
    params = authorization_params(
        SECRETS_ONLY, pkce_pair()[1], redirect_uri="http://127.0.0.1/callback"
    )
    page = await http.get("/authorize?" + urlencode(params))
    assert page.status_code == 400
    assert "location" not in page.headers  # the client's configuration: shown, not sent
    assert "invalid_client_metadata" in page.text
    assert "token_endpoint_auth_methods_supported" in page.text
    assert "no shared secrets" in page.text


def test_without_the_proxys_ca_the_certificate_is_refused(
    make_settings: Callable[..., Settings], proxy: ForwardProxy
) -> None:
    settings = make_settings(outbound_proxy=proxy.url)  # the default trust store only
    with pytest.raises(FetchError, match=r"cannot connect: TLS with claude\.ai failed: .*CERTIF"):
        fetcher_for(settings).get(DOCUMENTS["Claude"]["client_id"])
    assert proxy.tunnels == ["claude.ai:443"]
    assert proxy.served == []  # nothing was asked inside a tunnel not trusted


@pytest.mark.anyio
async def test_an_untrusted_certificate_ends_the_authorization_on_a_page_not_a_500(
    make_settings: Callable[..., Settings], proxy: ForwardProxy
) -> None:
    app = create_app(make_settings(outbound_proxy=proxy.url))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=ISSUER) as http:
        params = authorization_params(DOCUMENTS["Zed"]["client_id"], pkce_pair()[1])
        page = await http.get("/authorize?" + urlencode(params))
    assert page.status_code == 400
    assert "invalid_client" in page.text
    assert "could not be fetched" in page.text


def test_a_proxy_that_cannot_be_reached_is_named_in_the_error(
    make_settings: Callable[..., Settings], proxy: ForwardProxy
) -> None:
    closed = free_port()
    settings = make_settings(
        outbound_proxy=f"http://127.0.0.1:{closed}", outbound_ca_file=str(proxy.ca_file)
    )
    with pytest.raises(
        FetchError, match=rf"cannot connect to the outbound proxy http://127\.0\.0\.1:{closed}"
    ):
        fetcher_for(settings).get(DOCUMENTS["Zed"]["client_id"])


@pytest.mark.anyio
async def test_an_unreachable_proxy_is_remembered_as_a_failed_fetch(
    make_settings: Callable[..., Settings], proxy: ForwardProxy
) -> None:
    settings = make_settings(
        outbound_proxy=f"http://127.0.0.1:{free_port()}", outbound_ca_file=str(proxy.ca_file)
    )
    app = create_app(settings)
    gate = app.state.mcpauth.clients.gate
    url = DOCUMENTS["Zed"]["client_id"]
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=ISSUER) as http:
        params = authorization_params(url, pkce_pair()[1])
        first = await http.get("/authorize?" + urlencode(params))
        assert url in gate._failed  # remembered for the gate's failure_ttl
        second = await http.get("/authorize?" + urlencode(params))
    for page in (first, second):
        assert page.status_code == 400
        assert "could not be fetched" in page.text


def test_a_host_the_proxy_refuses_to_tunnel_to_is_a_precise_error(
    proxied: Settings, proxy: ForwardProxy
) -> None:
    with pytest.raises(FetchError, match="the outbound proxy refused the tunnel"):
        fetcher_for(proxied).get("https://elsewhere.example.net/oauth/client.json")
    assert proxy.tunnels == ["elsewhere.example.net:443"]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://127.0.0.1/client.json", "special-use address (loopback)"),
        ("https://[::1]/client.json", "special-use address (loopback)"),
        ("https://[::ffff:10.0.0.1]/client.json", "(private, IPv4-mapped)"),
        ("https://169.254.169.254/latest/meta-data", "(link-local)"),
        ("https://localhost/client.json", "local name (localhost)"),
        ("https://app.localhost/client.json", "local name (localhost)"),
        ("https://metadata.google.internal/client.json", "local name (internal)"),
        ("https://printer.local/client.json", "local name (local)"),
        ("https://router.home.arpa/client.json", "local name (home.arpa)"),
        ("https://wiki/client.json", "single-label name"),
        ("https://2130706433/client.json", "single-label name"),
        ("https://0x7f.1/client.json", "numeric notation"),
    ],
)
def test_t21_through_the_proxy_private_targets_are_refused_by_name_before_any_tunnel(
    proxied: Settings, proxy: ForwardProxy, url: str, reason: str
) -> None:
    with pytest.raises(FetchError, match=f"refused: .*{re.escape(reason)}"):
        fetcher_for(proxied).get(url)
    assert proxy.tunnels == []  # the proxy, which would resolve it, never heard of it


def test_t21_the_allow_list_lets_a_local_host_through_the_proxy(
    make_settings: Callable[..., Settings], proxy: ForwardProxy
) -> None:
    settings = make_settings(
        outbound_proxy=proxy.url,
        outbound_ca_file=str(proxy.ca_file),
        cimd_allow_hosts=("localhost",),  # what tests (and intranets) use for loopback hosts
    )
    with pytest.raises(FetchError, match="HTTP 404"):
        fetcher_for(settings).get("https://localhost/client.json")
    assert proxy.tunnels == ["localhost:443"]


@pytest.mark.anyio
async def test_trusted_issuers_keys_come_through_the_proxy(
    make_settings: Callable[..., Settings], proxy: ForwardProxy
) -> None:
    settings = make_settings(
        outbound_proxy=proxy.url,
        outbound_ca_file=str(proxy.ca_file),
        trusted_idps={IDP: f"{IDP}/jwks.json"},
    )
    issuers = IdentityProviders(
        settings.trusted_idps, trusted_key_sets(settings, outbound_for(settings))
    )
    await issuers.load(IDP, kid="idp-1", requester="192.0.2.1")
    assert list(issuers.keys(IDP)) == ["idp-1"]
    assert proxy.served == [f"{IDP}/jwks.json"]


@pytest.mark.anyio
async def test_upstream_providers_are_reached_through_the_proxy(
    proxied: Settings, proxy: ForwardProxy
) -> None:
    provider = UpstreamProvider(id="corp", name="Corp", issuer=UPSTREAM, client_id="mcpauth")
    providers = UpstreamProviders(
        [provider], key=b"k" * 32, timeout=5, outbound=outbound_for(proxied)
    )
    found = await providers.metadata(next(iter(providers)))
    assert found.token_endpoint == f"{UPSTREAM}/token"
    assert proxy.served == [f"{UPSTREAM}/.well-known/openid-configuration"]
