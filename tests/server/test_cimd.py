"""Client ID Metadata Document rules (AS-06..AS-18) with a stand-in fetcher: URL rules, document
rules, the host policy and the cache."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from freezegun import freeze_time

from mcpauth.errors import InvalidClient
from mcpauth.server.clients.fetch_admission import BUSY, FetchDeclined
from mcpauth.server.clients.metadata_documents import (
    CIMDError,
    MetadataCache,
    UnacceptableClientMetadata,
    cache_lifetime,
    check_client_id_url,
    is_cimd_client_id,
    resolve_client_metadata_document,
)
from mcpauth.server.clients.ssrf import FetchedResponse, FetchError
from mcpauth.server.config import Settings

URL = "https://app.example.com/oauth/client.json"


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "client_id": URL,
        "client_name": "Example App",
        "redirect_uris": ["http://127.0.0.1/callback"],
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not None}


@dataclass
class Publisher:
    """Serves one document for every URL and counts the fetches."""

    body: Any = field(default_factory=document)
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    error: FetchError | FetchDeclined | None = None
    fetched: list[str] = field(default_factory=list)

    def __call__(self, url: str) -> FetchedResponse:
        self.fetched.append(url)
        if self.error is not None:
            raise self.error
        content = self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()
        return FetchedResponse(url, 200, httpx2.Headers(self.headers), content)


@pytest.fixture
def publisher() -> Publisher:
    return Publisher()


@pytest.fixture
def resolve(make_settings: Callable[..., Settings], publisher: Publisher) -> Callable[..., Any]:
    def run(client_id: str = URL, *, cache: MetadataCache | None = None, **settings: Any) -> Any:
        return resolve_client_metadata_document(
            make_settings(**settings), client_id, fetcher=publisher, cache=cache
        )

    return run


def test_as08_a_valid_document_becomes_an_unsaved_public_cimd_client(
    resolve: Callable[..., Any],
) -> None:
    with freeze_time("2026-03-01 12:00:00"):
        client = resolve()
    assert client.client_id == URL
    assert client.source == "cimd"
    assert client.client_name == "Example App"
    assert client.redirect_uris == ["http://127.0.0.1/callback"]
    assert client.grant_types == ["authorization_code"]
    assert client.response_types == ["code"]
    assert client.token_endpoint_auth_method == "none"
    assert client.secret_digest is None
    assert client.created_at == 1772366400
    assert client.client_metadata["client_id"] == URL
    assert client.client_metadata["client_name"] == "Example App"


def test_as32_only_https_client_ids_are_metadata_document_urls() -> None:
    assert is_cimd_client_id(URL)
    assert is_cimd_client_id("HTTPS://app.example.com/c")
    assert not is_cimd_client_id("Xk3v9Q-locally-issued")
    assert not is_cimd_client_id("http://app.example.com/c")


@pytest.mark.parametrize(
    ("client_id", "message"),
    [
        ("http://app.example.com/client.json", "must use the https scheme"),
        ("https://app.example.com", "must contain a path"),
        ("https://app.example.com/", "must contain a path"),
        ("https://app.example.com/./client.json", "'.' or '..' path segments"),
        ("https://app.example.com/a/../client.json", "'.' or '..' path segments"),
        ("https://app.example.com/a/%2E%2e/client.json", "'.' or '..' path segments"),
        ("https://app.example.com/client.json/.", "'.' or '..' path segments"),
        ("https://app.example.com/client.json#frag", "must not contain a fragment"),
        ("https://app.example.com/client.json#", "must not contain a fragment"),
        ("https://user@app.example.com/client.json", "username or password"),
        ("https://user:pw@app.example.com/client.json", "username or password"),
        ("https://app.example.com/client.json?v=1", "must not contain a query"),
        ("https://app.example.com/client.json?", "must not contain a query"),
        ("https:///client.json", "must name a host"),
        ("https://app.example.com:99999/client.json", "invalid port"),
        ("https://app.example.com/client .json", "spaces, control characters"),
        ("https://app.example.com\\@evil.example/c", "spaces, control characters"),
        ("https://app.example.com/" + "a" * 2048, "longer than 2048"),
    ],
)
def test_as15_client_id_url_rules_are_enforced_before_any_fetch(
    resolve: Callable[..., Any], publisher: Publisher, client_id: str, message: str
) -> None:
    with pytest.raises(CIMDError, match=message):
        resolve(client_id)
    assert publisher.fetched == []


def test_as15_a_port_is_allowed_in_the_client_id_url() -> None:
    assert check_client_id_url("https://app.example.com:8443/c.json") == (
        "https://app.example.com:8443/c.json"
    )


def test_cimd_errors_are_invalid_client_errors_that_render_themselves() -> None:
    error = CIMDError("client_id URL must use the https scheme")
    assert isinstance(error, InvalidClient)
    assert error.to_dict() == {
        "error": "invalid_client",
        "error_description": "client_id URL must use the https scheme",
    }


def test_as06_metadata_documents_can_be_switched_off(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    with pytest.raises(CIMDError, match="does not accept client metadata document URLs"):
        resolve(cimd_enabled=False)
    assert publisher.fetched == []


@pytest.mark.parametrize(
    ("deny", "client_id"),
    [
        (("app.example.com",), URL),
        (("APP.example.com.",), URL),
        ((".example.com",), URL),
        ((".example.com",), "https://deep.sub.example.com/c.json"),
    ],
)
def test_as18_the_deny_list_wins_over_the_allow_list(
    resolve: Callable[..., Any], publisher: Publisher, deny: tuple[str, ...], client_id: str
) -> None:
    with pytest.raises(CIMDError, match="are not accepted here"):
        resolve(client_id, cimd_deny_hosts=deny, cimd_allow_hosts=("app.example.com",))
    assert publisher.fetched == []


def test_as18_a_suffix_entry_does_not_deny_lookalike_domains(resolve: Callable[..., Any]) -> None:
    client = resolve(cimd_deny_hosts=(".ample.com", "example.com"))
    assert client.client_id == URL


def test_as14_a_failed_fetch_aborts_saying_only_that_the_document_could_not_be_fetched(
    resolve: Callable[..., Any], publisher: Publisher, caplog: pytest.LogCaptureFixture
) -> None:
    publisher.error = FetchError("refused 10.0.0.1: 10.0.0.1 is a special-use address (private)")
    with pytest.raises(CIMDError) as caught:
        resolve()
    # not an oracle: no resolved address, no connection error for the requester
    assert caught.value.description == "the client metadata document could not be fetched"
    assert caught.value.__cause__ is publisher.error
    assert "10.0.0.1 is a special-use address" in caplog.text  # the operator still sees why


def test_a_fetch_declined_by_a_limit_is_described_as_such(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    publisher.error = FetchDeclined(BUSY)
    with pytest.raises(CIMDError) as caught:
        resolve()
    assert caught.value.description == BUSY


@pytest.mark.parametrize(
    ("content_type", "accepted"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/client-metadata+json", True),
        ("text/html", False),
        ("text/plain", False),
        ("", False),
    ],
)
def test_as12_the_document_must_be_served_as_json(
    resolve: Callable[..., Any], publisher: Publisher, content_type: str, accepted: bool
) -> None:
    publisher.headers = {"content-type": content_type} if content_type else {}
    if accepted:
        assert resolve().client_id == URL
    else:
        with pytest.raises(CIMDError, match="must be served as application/json"):
            resolve()


NESTED = b'{"client_id": "x", "a": ' + b"[" * 40 + b"]" * 40 + b"}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>hello</html>", "not valid JSON"),
        (b'{"client_id": ', "not valid JSON"),
        (b"\xff\xfe\xfa", "not valid JSON"),
        (b'{"client_id": "a", "client_id": "b"}', "duplicate member names"),
        (b'{"client_id": NaN}', "NaN is not JSON"),
        (b'["https://app.example.com/oauth/client.json"]', "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
        (NESTED, "nests deeper than 16 levels"),
        (b"[" * 100_000, "nests deeper than 16 levels"),
    ],
)
def test_as12_the_document_must_be_a_json_object(
    resolve: Callable[..., Any], publisher: Publisher, body: bytes, message: str
) -> None:
    publisher.body = body
    with pytest.raises(CIMDError, match=message):
        resolve()


def test_as12_brackets_inside_strings_do_not_count_as_nesting(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    publisher.body = document(client_name='[[[[[[[[[[[[[[[[[[[[ \\"{{{{{{{{{{{{{{{{{{{{{{{{')
    assert resolve().client_name.startswith("[[[[")


@pytest.mark.parametrize(
    "declared",
    [
        None,
        URL + "/",
        URL.upper(),
        "https://APP.example.com/oauth/client.json",
        "https://app.example.com:443/oauth/client.json",
        "https://app.example.com/oauth/%63lient.json",
        "https://evil.example/oauth/client.json",
        ["https://app.example.com/oauth/client.json"],
    ],
)
def test_as09_the_document_client_id_must_equal_the_url_exactly(
    resolve: Callable[..., Any], publisher: Publisher, declared: Any
) -> None:
    publisher.body = document(client_id=declared) if declared else document(client_id=None)
    with pytest.raises(CIMDError, match=r"client_id \(.*\) is not its URL"):
        resolve()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"client_name": None}, "non-empty client_name"),
        ({"client_name": "   "}, "non-empty client_name"),
        ({"client_name": 42}, "non-empty client_name"),
        ({"client_name": "x" * 201}, "client_name: longer than 200"),
        ({"redirect_uris": None}, "must list its redirect_uris"),
        ({"redirect_uris": []}, "must list its redirect_uris"),
        ({"redirect_uris": "http://127.0.0.1/cb"}, "must list its redirect_uris"),
        ({"redirect_uris": [42]}, "redirect_uris: must be an array of strings"),
    ],
)
def test_as12_client_name_and_redirect_uris_are_required(
    resolve: Callable[..., Any], publisher: Publisher, changes: dict[str, Any], message: str
) -> None:
    publisher.body = document(**changes)
    with pytest.raises(CIMDError, match=message):
        resolve()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("http://app.example.com/cb", "http is allowed only for loopback hosts"),
        ("javascript:alert(1)", "'javascript' scheme is not allowed"),
        ("https://app.example.com/cb#x", "must not contain a fragment"),
        ("https://*.example.com/cb", "wildcards are not allowed"),
        ("/relative/cb", "must be an absolute URI"),
        ("vbscript:msgbox(1)", "'vbscript' scheme is not allowed"),
    ],
)
def test_as11_each_redirect_uri_follows_the_registration_rules(
    resolve: Callable[..., Any], publisher: Publisher, uri: str, message: str
) -> None:
    publisher.body = document(redirect_uris=["http://127.0.0.1/callback", uri])
    with pytest.raises(CIMDError, match=message):
        resolve()


@pytest.mark.parametrize(
    ("uris", "declared", "expected"),
    [
        (["http://127.0.0.1/cb", "http://[::1]/cb", "http://localhost:8080/cb"], None, "native"),
        (["com.example.app:/callback", "http://127.0.0.1/cb"], None, "native"),
        (["https://app.example.com/cb"], None, "web"),
        (["https://app.example.com/cb", "http://127.0.0.1/cb"], None, "web"),
        (["https://app.example.com/cb", "com.example.app:/cb"], "native", "native"),
    ],
)
def test_as17_clients_with_only_loopback_or_private_use_redirects_are_native(
    resolve: Callable[..., Any],
    publisher: Publisher,
    uris: list[str],
    declared: str | None,
    expected: str,
) -> None:
    publisher.body = document(redirect_uris=uris, application_type=declared)
    client = resolve()
    assert client.application_type == expected
    assert client.redirect_uris == uris


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"client_secret": "s3cret"}, "must not contain a client_secret"),
        ({"client_secret_expires_at": 0}, "must not contain a client_secret"),
        ({"token_endpoint_auth_method": "client_secret_basic"}, "'client_secret_basic' is not"),
        ({"token_endpoint_auth_method": "client_secret_post"}, "'client_secret_post' is not"),
        ({"token_endpoint_auth_method": "client_secret_jwt"}, "'client_secret_jwt' is not"),
        ({"token_endpoint_auth_method": "tls_client_auth"}, "'tls_client_auth' is not acc"),
        ({"token_endpoint_auth_method": "private_key_jwt"}, "requires jwks or jwks_uri"),
    ],
)
def test_as16_shared_secret_authentication_is_refused(
    resolve: Callable[..., Any], publisher: Publisher, changes: dict[str, Any], message: str
) -> None:
    publisher.body = document(**changes)
    with pytest.raises(CIMDError, match=message):
        resolve()


PUBLIC_JWK = {
    "kty": "EC",
    "crv": "P-256",
    "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
    "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
}


@pytest.mark.parametrize(
    "keys",
    [{"jwks_uri": "https://app.example.com/jwks.json"}, {"jwks": {"keys": [PUBLIC_JWK]}}],
)
def test_as16_private_key_jwt_with_keys_makes_a_confidential_client(
    resolve: Callable[..., Any], publisher: Publisher, keys: dict[str, Any]
) -> None:
    publisher.body = document(token_endpoint_auth_method="private_key_jwt", **keys)
    client = resolve()
    assert client.token_endpoint_auth_method == "private_key_jwt"
    assert client.jwks_uri == keys.get("jwks_uri")
    assert client.jwks == keys.get("jwks")
    assert client.secret_digest is None


KEYS = {"jwks_uri": "https://app.example.com/jwks.json"}


@pytest.mark.parametrize(
    ("changes", "method"),
    [
        ({}, "none"),  # nothing declared: a public client
        ({"token_endpoint_auth_methods_supported": ["none"]}, "none"),
        (
            {"token_endpoint_auth_methods_supported": ["private_key_jwt", "none"], **KEYS},
            "private_key_jwt",
        ),
        (
            {"token_endpoint_auth_methods_supported": ["none", "private_key_jwt"], **KEYS},
            "private_key_jwt",
        ),
        # offered but no keys published: the method it can use
        ({"token_endpoint_auth_methods_supported": ["private_key_jwt", "none"]}, "none"),
        # ChatGPT's document: the list wins over the single member kept for older servers
        (
            {
                "token_endpoint_auth_method": "client_secret_basic",
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "none"],
            },
            "none",
        ),
        ({"token_endpoint_auth_methods": ["tls_client_auth", "none"]}, "none"),
        ({"token_endpoint_auth_method": "private_key_jwt", **KEYS}, "private_key_jwt"),
    ],
)
def test_sep3149_the_authentication_method_is_negotiated_from_what_the_document_offers(
    resolve: Callable[..., Any], publisher: Publisher, changes: dict[str, Any], method: str
) -> None:
    publisher.body = document(**changes)
    client = resolve()
    assert client.token_endpoint_auth_method == method
    assert "token_endpoint_auth_methods_supported" not in client.client_metadata
    assert client.client_metadata["token_endpoint_auth_method"] == method


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                ]
            },
            "token_endpoint_auth_methods_supported "
            "\\['client_secret_basic', 'client_secret_post'\\]: none is accepted"
            " for metadata document clients \\(no shared secrets\\)",
        ),
        (
            {"token_endpoint_auth_methods_supported": ["tls_client_auth"]},
            "token_endpoint_auth_methods_supported 'tls_client_auth' is not accepted",
        ),
        ({"token_endpoint_auth_methods_supported": []}, "must be a non-empty array of strings"),
        ({"token_endpoint_auth_methods_supported": "none"}, "must be a non-empty array of strings"),
        ({"token_endpoint_auth_methods_supported": ["none", 7]}, "non-empty array of strings"),
        ({"token_endpoint_auth_method": ["none"]}, "token_endpoint_auth_method must be a string"),
        (
            {"token_endpoint_auth_methods_supported": ["private_key_jwt"]},
            "requires jwks or jwks_uri",
        ),
    ],
)
def test_sep3149_no_method_in_common_is_refused_as_the_clients_configuration(
    resolve: Callable[..., Any], publisher: Publisher, changes: dict[str, Any], message: str
) -> None:
    publisher.body = document(**changes)
    with pytest.raises(UnacceptableClientMetadata, match=message):
        resolve()


def test_grant_types_this_server_does_not_know_are_ignored(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    saml = "urn:ietf:params:oauth:grant-type:saml2-bearer"
    publisher.body = document(grant_types=["authorization_code", "refresh_token", saml])
    assert resolve().grant_types == ["authorization_code", "refresh_token"]
    publisher.body = document(grant_types=[saml])
    with pytest.raises(UnacceptableClientMetadata, match="is not supported"):
        resolve()


def test_the_device_grant_in_a_document_is_kept(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    device = "urn:ietf:params:oauth:grant-type:device_code"  # in VS Code's document (RFC 8628)
    publisher.body = document(grant_types=["authorization_code", "refresh_token", device])
    assert resolve().grant_types == ["authorization_code", "refresh_token", device]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"jwks_uri": "http://app.example.com/jwks"}, "jwks_uri: must be an https URL"),
        ({"jwks": {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}}, "public asymmetric keys"),
        ({"jwks": {"keys": [{**PUBLIC_JWK, "d": "private"}]}}, "public asymmetric keys"),
    ],
)
def test_as16_key_material_in_the_document_is_checked(
    resolve: Callable[..., Any], publisher: Publisher, changes: dict[str, Any], message: str
) -> None:
    publisher.body = document(token_endpoint_auth_method="private_key_jwt", **changes)
    with pytest.raises(CIMDError, match=message):
        resolve()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"grant_types": ["client_credentials"]}, "pre-registered by an administrator"),
        ({"grant_types": ["implicit"]}, "implicit grant is removed"),
        ({"grant_types": ["password"]}, "must not be used"),
        ({"grant_types": ["urn:ietf:params:oauth:grant-type:jwt-bearer"]}, "is not supported"),
        ({"response_types": ["token"]}, "response_types: 'token' is not supported"),
        ({"scope": "bad\\scope"}, "scope: must be space-separated scope tokens"),
    ],
)
def test_as13_grant_types_are_limited_to_the_code_flow(
    resolve: Callable[..., Any], publisher: Publisher, changes: dict[str, Any], message: str
) -> None:
    publisher.body = document(**changes)
    with pytest.raises(CIMDError, match=message):
        resolve()


def test_as13_refresh_tokens_scope_and_descriptive_members_are_kept(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    publisher.body = document(
        grant_types=["authorization_code", "refresh_token"],
        scope="mcp:tools mcp:admin",
        client_uri="https://app.example.com",
        logo_uri="https://app.example.com/logo.png",
        unknown_member={"ignored": True},
    )
    client = resolve()
    assert client.grant_types == ["authorization_code", "refresh_token"]
    assert client.scope == "mcp:tools mcp:admin"
    assert client.client_metadata["logo_uri"] == "https://app.example.com/logo.png"
    assert "unknown_member" not in client.client_metadata


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, 300),
        ({"cache-control": "max-age=600"}, 600),
        ({"cache-control": "public, max-age=600"}, 600),
        ({"cache-control": 'max-age="600"'}, 600),
        ({"cache-control": "max-age=10"}, 60),
        ({"cache-control": "max-age=31536000, immutable"}, 86400),
        ({"cache-control": "s-maxage=120, max-age=3600"}, 120),
        ({"cache-control": "max-age=0"}, 0),
        ({"cache-control": "max-age=-5"}, 0),
        ({"cache-control": "max-age=soon"}, 0),
        ({"cache-control": "no-store"}, 0),
        ({"cache-control": "No-Store, max-age=600"}, 0),
        ({"cache-control": "no-cache"}, 0),
        ({"expires": "Sun, 01 Mar 2026 13:00:00 GMT"}, 3600),
        (
            {"expires": "Sun, 01 Mar 2026 13:00:00 GMT", "date": "Sun, 01 Mar 2026 12:30:00 GMT"},
            1800,
        ),
        ({"expires": "Sun, 01 Mar 2026 11:00:00 GMT"}, 0),
        ({"expires": "0"}, 0),
        ({"expires": "Sun, 01 Mar 2026 13:00:00 GMT", "cache-control": "max-age=120"}, 120),
    ],
)
def test_as10_cache_lifetime_follows_http_within_bounds(
    headers: dict[str, str], seconds: int
) -> None:
    now = 1772366400.0  # 2026-03-01 12:00:00 UTC
    assert cache_lifetime(httpx2.Headers(headers), now) == seconds


def test_as10_a_valid_document_is_served_from_the_cache_until_it_expires(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    publisher.headers["cache-control"] = "max-age=600"
    cache = MetadataCache()
    with freeze_time("2026-03-01 12:00:00") as frozen:
        first = resolve(cache=cache)
        frozen.tick(599)
        second = resolve(cache=cache)
        assert publisher.fetched == [URL]
        frozen.tick(1)
        resolve(cache=cache)
    assert publisher.fetched == [URL, URL]
    assert second.client_id == first.client_id
    assert second.created_at == first.created_at + 599


def test_as10_no_store_documents_are_fetched_every_time(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    publisher.headers["cache-control"] = "no-store"
    cache = MetadataCache()
    resolve(cache=cache)
    resolve(cache=cache)
    assert publisher.fetched == [URL, URL]
    assert len(cache) == 0


def test_as10_invalid_documents_and_fetch_errors_are_never_cached(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    publisher.headers["cache-control"] = "max-age=3600"
    cache = MetadataCache()
    publisher.body = document(client_id="https://evil.example/c.json")
    with pytest.raises(CIMDError):
        resolve(cache=cache)
    publisher.error = FetchError("timed out")
    with pytest.raises(CIMDError):
        resolve(cache=cache)
    assert len(cache) == 0
    publisher.error = None
    publisher.body = document()
    resolve(cache=cache)
    resolve(cache=cache)
    assert len(publisher.fetched) == 3


def test_as10_an_expired_entry_is_not_served_when_the_refetch_fails(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    cache = MetadataCache()
    with freeze_time("2026-03-01 12:00:00") as frozen:
        resolve(cache=cache)
        frozen.tick(301)
        publisher.error = FetchError("HTTP 404; expected 200")
        with pytest.raises(CIMDError, match="could not be fetched"):
            resolve(cache=cache)
    assert len(cache) == 0


def test_as10_the_cache_evicts_the_least_recently_used_document(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    cache = MetadataCache(max_entries=2)
    urls = [f"https://app.example.com/client-{n}.json" for n in range(3)]
    for url in urls[:2]:
        publisher.body = document(client_id=url)
        resolve(url, cache=cache)
    publisher.body = document(client_id=urls[0])
    resolve(urls[0], cache=cache)  # a hit: client-0 becomes the most recently used
    publisher.body = document(client_id=urls[2])
    resolve(urls[2], cache=cache)  # evicts client-1
    assert len(cache) == 2
    publisher.fetched.clear()
    for url in (urls[0], urls[2], urls[1]):
        publisher.body = document(client_id=url)
        resolve(url, cache=cache)
    assert publisher.fetched == [urls[1]]


def test_as10_cached_clients_are_fresh_copies(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    cache = MetadataCache()
    first = resolve(cache=cache)
    first.redirect_uris.append("http://127.0.0.1/evil")
    first.client_metadata["client_name"] = "Changed"
    second = resolve(cache=cache)
    assert second.redirect_uris == ["http://127.0.0.1/callback"]
    assert second.client_metadata["client_name"] == "Example App"
    assert publisher.fetched == [URL]


def test_as18_the_deny_list_applies_to_cached_documents_too(
    resolve: Callable[..., Any], publisher: Publisher
) -> None:
    cache = MetadataCache()
    resolve(cache=cache)
    with pytest.raises(CIMDError, match="not accepted here"):
        resolve(cache=cache, cimd_deny_hosts=("app.example.com",))
