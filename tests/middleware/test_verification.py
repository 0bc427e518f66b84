"""JWKS discovery and caching, the verified-token cache, several issuers, introspection."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from freezegun import freeze_time

from mcpauth.errors import (
    ConfigurationError,
    FetchError,
    InvalidToken,
    OAuthError,
    ServerError,
    TemporarilyUnavailable,
)
from mcpauth.middleware import (
    IntrospectionVerifier,
    JWKSCache,
    JWTVerifier,
    Limits,
    MultiIssuerVerifier,
    TokenExchanger,
    TokenVerifier,
    VerifiedToken,
)

from .helpers import (
    INTROSPECTION_CLIENT,
    ISSUER,
    OTHER_RESOURCE,
    RESOURCE,
    FakeAuthorizationServer,
    RecordingApp,
    bearer,
    client_for,
)

pytestmark = pytest.mark.anyio


async def test_jwks_uri_is_discovered_from_rfc_8414_metadata_and_cached(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    async with client_for(protect()) as client:
        for _ in range(3):
            response = await client.get("/mcp", headers=bearer(auth_server.mint()))
            assert response.status_code == 200
    assert auth_server.fetches == {"metadata": 1, "jwks": 1}


async def test_jwks_uri_falls_back_to_openid_connect_discovery() -> None:
    server = FakeAuthorizationServer(metadata_path="openid-configuration")
    async with server.http_client() as http:
        verifier = JWTVerifier(ISSUER, RESOURCE, http=http)
        verified = await verifier.verify_token(server.mint())
    assert verified.subject == "alice"
    assert server.fetches["metadata"] == 2


async def test_metadata_naming_another_issuer_is_not_used() -> None:
    server = FakeAuthorizationServer(metadata_issuer="https://evil.example.com")
    async with server.http_client() as http:
        verifier = JWTVerifier(ISSUER, RESOURCE, http=http)
        with pytest.raises(TemporarilyUnavailable):
            await verifier.verify_token(server.mint())
    assert "jwks" not in server.fetches


async def test_an_unreachable_authorization_server_gives_503_not_401(
    protect: Any, auth_server: FakeAuthorizationServer, recording_app: RecordingApp
) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(refuse))
    async with http, client_for(protect(http_client=http)) as client:
        response = await client.get("/mcp", headers=bearer(auth_server.mint()))
    assert response.status_code == 503
    assert response.json()["error"] == "temporarily_unavailable"
    assert recording_app.calls == []


async def test_an_unknown_kid_triggers_one_refetch_so_rotated_keys_are_accepted(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    with freeze_time("2026-01-01 00:00:00") as clock:
        async with client_for(protect()) as client:
            assert (await client.get("/mcp", headers=bearer(auth_server.mint()))).status_code == 200
            clock.tick(60)
            auth_server.rotate()
            response = await client.get("/mcp", headers=bearer(auth_server.mint()))
    assert response.status_code == 200
    assert auth_server.fetches["jwks"] == 2


async def test_unknown_kids_refetch_the_jwks_at_most_once_per_interval_t15(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    with freeze_time("2026-01-01 00:00:00") as clock:
        async with client_for(protect()) as client:
            await client.get("/mcp", headers=bearer(auth_server.mint()))
            clock.tick(60)
            for i in range(20):
                response = await client.get("/mcp", headers=bearer(auth_server.mint(kid=f"k{i}")))
                assert response.status_code == 401
    assert auth_server.fetches["jwks"] == 2


async def test_the_jwks_is_refetched_when_its_cache_control_max_age_runs_out(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    auth_server.jwks_cache_control = "public, max-age=120"
    with freeze_time("2026-01-01 00:00:00") as clock:
        async with client_for(protect()) as client:
            await client.get("/mcp", headers=bearer(auth_server.mint()))
            clock.tick(100)
            await client.get("/mcp", headers=bearer(auth_server.mint()))
            assert auth_server.fetches["jwks"] == 1
            clock.tick(30)
            await client.get("/mcp", headers=bearer(auth_server.mint()))
    assert auth_server.fetches["jwks"] == 2


async def test_a_verified_token_is_not_verified_again_until_it_expires(
    auth_server: FakeAuthorizationServer, protect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    with freeze_time("2026-01-01 00:00:00") as clock:
        middleware = protect()
        original = middleware.verifier.verify_token

        async def counting(token: str) -> VerifiedToken:
            nonlocal calls
            calls += 1
            result: VerifiedToken = await original(token)
            return result

        monkeypatch.setattr(middleware.verifier, "verify_token", counting)
        token = auth_server.mint(exp=int(clock().timestamp()) + 60)
        async with client_for(middleware) as client:
            for _ in range(5):
                assert (await client.get("/mcp", headers=bearer(token))).status_code == 200
            assert calls == 1
            clock.tick(61)
            response = await client.get("/mcp", headers=bearer(token))
    assert calls == 2
    assert response.status_code == 200  # inside the 30 s leeway, re-verified rather than cached
    assert len(middleware.tokens) <= 1


async def test_the_token_cache_is_keyed_by_digest_and_bounded(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    middleware = protect(limits=Limits(token_cache_size=3))
    tokens = [auth_server.mint() for _ in range(5)]
    async with client_for(middleware) as client:
        for token in tokens:
            await client.get("/mcp", headers=bearer(token))
    assert len(middleware.tokens) == 3
    keys = list(middleware.tokens._entries)
    assert all(isinstance(key, bytes) and len(key) == 32 for key in keys)
    assert not any(token.encode() in key for token in tokens for key in keys)


async def test_several_authorization_servers_are_each_trusted_for_their_own_tokens() -> None:
    first = FakeAuthorizationServer()
    second = FakeAuthorizationServer(issuer="https://as2.example.com", alg="RS256")
    async with first.http_client() as h1, second.http_client() as h2:
        verifier = MultiIssuerVerifier(
            {
                first.issuer: JWTVerifier(first.issuer, RESOURCE, http=h1),
                second.issuer: JWTVerifier(second.issuer, RESOURCE, http=h2),
            }
        )
        assert (await verifier.verify_token(first.mint())).issuer == first.issuer
        assert (await verifier.verify_token(second.mint())).issuer == second.issuer
        forged = second.mint(iss=first.issuer)  # signed by the second, claims the first
        with pytest.raises(InvalidToken):
            await verifier.verify_token(forged)
        with pytest.raises(InvalidToken):
            await verifier.verify_token(first.mint(iss="https://unknown.example"))


def introspection_verifier(http: httpx2.AsyncClient, **options: Any) -> IntrospectionVerifier:
    return IntrospectionVerifier(
        resource=RESOURCE,
        client_id=INTROSPECTION_CLIENT[0],
        client_secret=INTROSPECTION_CLIENT[1],
        issuer=ISSUER,
        http=http,
        **options,
    )


def active(**overrides: Any) -> dict[str, Any]:
    import time

    data = {
        "active": True,
        "iss": ISSUER,
        "sub": "bob",
        "client_id": "c",
        "aud": RESOURCE,
        "scope": "a b",
        "exp": int(time.time()) + 300,
    }
    data.update(overrides)
    return data


async def test_introspection_accepts_an_active_token_for_this_resource(
    auth_server: FakeAuthorizationServer,
) -> None:
    auth_server.active["opaque-1"] = active()
    async with auth_server.http_client() as http:
        verified = await introspection_verifier(http).verify_token("opaque-1")
    assert (verified.subject, verified.client_id, verified.scopes) == ("bob", "c", ("a", "b"))


@pytest.mark.parametrize(
    "data",
    [
        {"active": False},
        active(aud=OTHER_RESOURCE),
        active(aud=None),
        active(iss="https://evil.example"),
        active(exp=1),
        active(active="true"),
    ],
    ids=["inactive", "other audience", "no audience", "other issuer", "expired", "active not bool"],
)
async def test_introspection_refuses_tokens_that_are_not_for_this_resource_t14(
    data: dict[str, Any], auth_server: FakeAuthorizationServer
) -> None:
    auth_server.active["opaque"] = data
    async with auth_server.http_client() as http:
        with pytest.raises(InvalidToken) as caught:
            await introspection_verifier(http).verify_token("opaque")
    assert caught.value.status_code == 401


async def test_introspection_results_are_cached_no_longer_than_configured_or_the_token_lives(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    with freeze_time("2026-01-01 00:00:00") as clock:
        now = int(clock().timestamp())
        auth_server.active["opaque"] = active(exp=now + 20)
        async with auth_server.http_client() as http:
            middleware = protect(verifier=introspection_verifier(http, cache_seconds=10))
            async with client_for(middleware) as client:
                assert (await client.get("/mcp", headers=bearer("opaque"))).status_code == 200
                await client.get("/mcp", headers=bearer("opaque"))
                assert auth_server.fetches["introspect"] == 1
                clock.tick(11)
                auth_server.active["opaque"] = {"active": False}  # revoked
                response = await client.get("/mcp", headers=bearer("opaque"))
    assert auth_server.fetches["introspect"] == 2
    assert response.status_code == 401


async def test_introspection_without_exp_is_never_cached(
    auth_server: FakeAuthorizationServer, protect: Any
) -> None:
    auth_server.active["opaque"] = active(exp=None)
    async with auth_server.http_client() as http:
        middleware = protect(verifier=introspection_verifier(http))
        async with client_for(middleware) as client:
            await client.get("/mcp", headers=bearer("opaque"))
            await client.get("/mcp", headers=bearer("opaque"))
    assert auth_server.fetches["introspect"] == 2


async def test_introspection_authenticates_the_resource_server(
    auth_server: FakeAuthorizationServer,
) -> None:
    auth_server.active["opaque"] = active()
    async with auth_server.http_client() as http:
        verifier = IntrospectionVerifier(
            resource=RESOURCE,
            client_id="rs-client",
            client_secret="wrong",
            issuer=ISSUER,
            http=http,
        )
        with pytest.raises(ServerError):
            await verifier.verify_token("opaque")


async def test_a_custom_verifier_satisfies_the_token_verifier_protocol(
    protect: Any, recording_app: RecordingApp
) -> None:
    class Static:
        async def verify_token(self, token: str) -> VerifiedToken:
            if token != "letmein":
                raise InvalidToken("no")
            return VerifiedToken(
                subject="carol",
                client_id="c",
                scopes=("x",),
                expires_at=None,
                issuer=ISSUER,
                resource=RESOURCE,
            )

    assert isinstance(Static(), TokenVerifier)
    async with client_for(protect(verifier=Static())) as client:
        ok = await client.get("/mcp", headers=bearer("letmein"))
        refused = await client.get("/mcp", headers=bearer("nope"))
    assert (ok.status_code, refused.status_code) == (200, 401)
    assert recording_app.calls[0]["subject"] == "carol"


async def test_a_given_jwks_uri_is_used_without_discovery() -> None:
    server = FakeAuthorizationServer()
    async with server.http_client() as http:
        verifier = JWTVerifier(ISSUER, RESOURCE, f"{ISSUER}/jwks", http)
        assert (await verifier.verify_token(server.mint())).resource == RESOURCE
        with pytest.raises(InvalidToken, match="not issued for this resource"):
            await verifier.verify_token(server.mint(aud=OTHER_RESOURCE))
    assert server.fetches == {"jwks": 1}


async def test_a_verifier_checks_its_audience_and_leaves_the_given_client_open() -> None:
    server = FakeAuthorizationServer()
    async with server.http_client() as http:
        verifier = JWTVerifier(ISSUER, RESOURCE, http=http)
        assert (verifier.audience, verifier.resource) == (RESOURCE, RESOURCE)
        assert (await verifier.verify_token(server.mint())).resource == RESOURCE
        with pytest.raises(InvalidToken, match="not issued for this resource"):
            await verifier.verify_token(server.mint(aud=OTHER_RESOURCE))
        await verifier.aclose()
        assert not http.is_closed  # the given client stays the caller's


def test_the_verifier_refuses_a_missing_audience_and_the_removed_keywords() -> None:
    with pytest.raises(TypeError, match="needs the audience"):
        JWTVerifier(ISSUER, "")
    with pytest.raises(TypeError, match="audience"):
        JWTVerifier(ISSUER)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="resource"):
        JWTVerifier(ISSUER, RESOURCE, resource=OTHER_RESOURCE)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="keys"):
        JWTVerifier(ISSUER, RESOURCE, keys=JWKSCache(ISSUER))  # type: ignore[call-arg]


def test_the_key_cache_options_reach_the_key_cache_with_its_own_defaults() -> None:
    tuned = JWTVerifier(ISSUER, RESOURCE, min_refresh_interval=5.0, max_cache_seconds=60.0)
    assert (tuned.keys.min_refresh_interval, tuned.keys.max_cache_seconds) == (5.0, 60.0)
    defaults, cache = JWTVerifier(ISSUER, RESOURCE).keys, JWKSCache(ISSUER)
    assert (defaults.min_refresh_interval, defaults.default_cache_seconds) == (
        cache.min_refresh_interval,
        cache.default_cache_seconds,
    )


async def test_a_failed_key_fetch_is_logged_as_the_one_fetch_error_and_answered_plainly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from mcpauth.server.clients import ssrf

    server = FakeAuthorizationServer(metadata_issuer="https://evil.example.com")
    async with server.http_client() as http:
        verifier = JWTVerifier(ISSUER, RESOURCE, http=http)
        with pytest.raises(TemporarilyUnavailable) as caught:
            await verifier.verify_token(server.mint())
    cause = caught.value.__cause__
    assert isinstance(cause, FetchError)
    assert FetchError is ssrf.FetchError  # the server's fetcher raises the same class
    assert not isinstance(cause, OAuthError)  # never sent as is
    assert "names issuer 'https://evil.example.com'" in cause.message
    assert cause.message in caplog.text
    assert "example.com" not in caught.value.description


async def test_a_fetch_error_from_a_verifier_of_your_own_is_a_plain_503_not_a_500(
    protect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class FetchesItsOwnKeys:
        async def verify_token(self, token: str) -> VerifiedToken:
            raise FetchError("https://keys.internal.example/jwks answered 502")

    async with client_for(protect(verifier=FetchesItsOwnKeys())) as client:
        response = await client.get("/mcp", headers=bearer("t"))
    assert response.status_code == 503
    assert response.json()["error"] == "temporarily_unavailable"
    assert "internal" not in response.text  # the URL is logged, never sent
    assert "https://keys.internal.example/jwks answered 502" in caplog.text
    assert "www-authenticate" not in response.headers  # a 503 is no challenge (RFC 6750 §3)


def test_an_introspection_endpoint_that_is_not_https_is_refused_at_construction() -> None:
    client_id, secret = INTROSPECTION_CLIENT
    options: dict[str, Any] = {"resource": RESOURCE, "client_id": client_id}
    with pytest.raises(ConfigurationError, match="https is required"):
        IntrospectionVerifier(client_secret=secret, endpoint="http://as.example.com/i", **options)
    loopback = IntrospectionVerifier(
        client_secret=secret, endpoint="http://127.0.0.1:9000/introspect", **options
    )
    assert loopback.endpoint == "http://127.0.0.1:9000/introspect"


def _huge_json(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, json={"active": True, "padding": "x" * (300 * 1024)})


async def test_an_introspection_answer_past_the_size_cap_is_not_read_whole() -> None:
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(_huge_json)) as http:
        verifier = IntrospectionVerifier(
            resource=RESOURCE,
            client_id=INTROSPECTION_CLIENT[0],
            client_secret=INTROSPECTION_CLIENT[1],
            endpoint="https://as.example.com/introspect",
            http=http,
        )
        with pytest.raises(TemporarilyUnavailable):  # not read whole, so no verdict
            await verifier.verify_token("opaque")


async def test_a_token_exchange_answer_past_the_size_cap_is_refused() -> None:
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(_huge_json)) as http:
        exchanger = TokenExchanger(
            issuer=ISSUER,
            client_id="c",
            client_secret="s",
            token_endpoint="https://as.example.com/token",
            http=http,
        )
        with pytest.raises(FetchError, match="more than"):
            await exchanger.token_for(OTHER_RESOURCE, subject_token="t")


@pytest.mark.parametrize("answer", [[], "token", 42, [{"access_token": "t"}]])
async def test_a_token_exchange_answer_that_is_not_a_json_object_is_a_fetch_error(
    answer: object,
) -> None:
    def json_but_no_object(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=answer)

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(json_but_no_object)) as http:
        exchanger = TokenExchanger(
            issuer=ISSUER,
            client_id="c",
            client_secret="s",
            token_endpoint="https://as.example.com/token",
            http=http,
        )
        with pytest.raises(FetchError, match="not an object"):
            await exchanger.token_for(OTHER_RESOURCE, subject_token="t")
