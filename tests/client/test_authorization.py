"""The authorization request and response (CL-12..CL-17, CL-19, CL-21, CL-24)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from mcpauth.client.authorization import (
    PendingAuthorization,
    build_authorization,
    parse_callback,
    select_scope,
)
from mcpauth.client.errors import AuthorizationFailed, PKCENotSupported, UnsafeURL
from mcpauth.client.pkce import PKCE, s256
from mcpauth.metadata import AuthorizationServerMetadata

ISSUER = "https://auth.example.com"
RESOURCE = "https://mcp.example.com/mcp"
REDIRECT = "http://127.0.0.1:5000/callback"


def metadata(**extra: object) -> AuthorizationServerMetadata:
    doc: dict[str, object] = {
        "issuer": ISSUER,
        "authorization_endpoint": f"{ISSUER}/authorize",
        "token_endpoint": f"{ISSUER}/token",
        "code_challenge_methods_supported": ["S256"],
    }
    doc.update(extra)
    return AuthorizationServerMetadata.model_validate(doc)


def pending(
    meta: AuthorizationServerMetadata | None = None, scope: str | None = "a"
) -> PendingAuthorization:
    return build_authorization(
        meta or metadata(),
        issuer=ISSUER,
        client_id="client-1",
        redirect_uri=REDIRECT,
        resource=RESOURCE,
        scope=scope,
    )


def query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def callback(p: PendingAuthorization, **params: str) -> str:
    values = {"code": "c0de", "state": p.state, **params}
    return f"{REDIRECT}?{urlencode({k: v for k, v in values.items() if v is not None})}"


# -- PKCE (CL-15) ----------------------------------------------------------------------------


def test_cl15_the_authorization_request_uses_pkce_s256() -> None:
    p = pending()
    params = query(p.url)
    assert params["code_challenge_method"] == "S256"
    assert params["code_challenge"] == s256(p.pkce.verifier)
    assert 43 <= len(p.pkce.verifier) <= 128


def test_cl15_pkce_verifiers_are_fresh_each_time() -> None:
    assert PKCE.generate().verifier != PKCE.generate().verifier


def test_cl15_the_client_refuses_when_code_challenge_methods_are_not_advertised() -> None:
    meta = metadata()
    meta.code_challenge_methods_supported = None
    with pytest.raises(PKCENotSupported, match="refusing"):
        pending(meta)


def test_cl15_the_client_refuses_a_server_without_s256() -> None:
    with pytest.raises(PKCENotSupported):
        pending(metadata(code_challenge_methods_supported=["plain"]))


def test_rfc7636_the_s256_challenge_matches_the_rfc_example() -> None:
    # RFC 7636 Appendix B
    assert (
        s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
        == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    )


# -- request parameters (CL-16, CL-19, CL-24) ---------------------------------------------------


def test_cl16_the_authorization_request_names_the_resource() -> None:
    assert query(pending().url)["resource"] == RESOURCE


def test_cl19_the_authorization_request_carries_an_unguessable_state() -> None:
    first, second = pending(), pending()
    assert query(first.url)["state"] == first.state
    assert first.state != second.state
    assert len(first.state) >= 32


def test_cl12_scope_is_left_out_when_there_is_none() -> None:
    assert "scope" not in query(pending(scope=None).url)


def test_existing_query_parameters_of_the_endpoint_are_kept() -> None:
    p = pending(metadata(authorization_endpoint=f"{ISSUER}/authorize?tenant=x"))
    assert query(p.url)["tenant"] == "x"
    assert query(p.url)["client_id"] == "client-1"


@pytest.mark.parametrize("endpoint", ["javascript:alert(1)", "data:text/html,x", "file:///x", ""])
def test_cl24_authorization_endpoints_that_are_not_http_are_refused(endpoint: str) -> None:
    with pytest.raises(UnsafeURL):
        pending(metadata(authorization_endpoint=endpoint))


# -- scope selection (CL-12..CL-14, CL-21) -----------------------------------------------------


@pytest.mark.parametrize(
    ("challenged", "supported", "expected"),
    [
        (["files:read"], ["a", "b"], "files:read"),  # 1: the challenge wins
        ([], ["a", "b"], "a b"),  # 2: all of scopes_supported
        ([], None, None),  # 3: omit
        ([], [], None),
        (["x"], None, "x"),  # CL-13: no relation to scopes_supported assumed
    ],
)
def test_cl12_scope_selection_follows_challenge_then_scopes_supported_then_omit(
    challenged: list[str], supported: list[str] | None, expected: str | None
) -> None:
    assert select_scope(challenged, supported) == expected


def test_cl14_step_up_requests_the_union_of_previous_and_challenged_scopes() -> None:
    assert select_scope(["b", "c"], ["z"], previous=["a", "b"]) == "a b c"


def test_cl21_offline_access_is_added_only_when_the_authorization_server_lists_it() -> None:
    assert select_scope(["a"], None, as_scopes=["a", "offline_access"]) == "a offline_access"
    assert select_scope(["a"], None, as_scopes=["a", "b"]) == "a"
    assert select_scope(["a"], None, as_scopes=None) == "a"
    assert select_scope(["a"], None, as_scopes=["offline_access"], offline_access=False) == "a"


# -- response checks: state (CL-19) and iss (CL-17) -------------------------------------------


def test_cl19_a_matching_state_yields_the_code() -> None:
    p = pending()
    assert parse_callback(p, callback(p)) == "c0de"


@pytest.mark.parametrize("state", [None, "", "wrong"])
def test_cl19_a_missing_or_wrong_state_is_discarded(state: str | None) -> None:
    p = pending()
    params = {"code": "c0de"} if state is None else {"code": "c0de", "state": state}
    url = f"{REDIRECT}?{urlencode(params)}"
    with pytest.raises(AuthorizationFailed, match="state"):
        parse_callback(p, url)


def test_cl19_a_repeated_state_is_discarded() -> None:
    p = pending()
    with pytest.raises(AuthorizationFailed, match="repeats"):
        parse_callback(p, f"{callback(p)}&state={p.state}")


@pytest.mark.parametrize(
    ("advertised", "iss", "accepted"),
    [
        (True, ISSUER, True),  # flag true, iss present and equal → compare (match)
        (True, "https://evil.example", False),  # flag true, iss present, different
        (True, None, False),  # flag true, iss absent → reject
        (False, ISSUER, True),  # flag absent, iss present → still compare
        (False, "https://evil.example", False),
        (False, None, True),  # flag absent, iss absent → proceed
    ],
)
def test_cl17_the_iss_validation_table(advertised: bool, iss: str | None, accepted: bool) -> None:
    meta = (
        metadata(authorization_response_iss_parameter_supported=True) if advertised else metadata()
    )
    p = pending(meta)
    url = callback(p, iss=iss) if iss is not None else callback(p)
    if accepted:
        assert parse_callback(p, url) == "c0de"
    else:
        with pytest.raises(AuthorizationFailed):
            parse_callback(p, url)


@pytest.mark.parametrize(
    "variant",
    [
        f"{ISSUER}/",
        "https://AUTH.example.com",
        "https://auth.example.com:443",
        "https%3A%2F%2Fauth.example.com",
    ],
)
def test_cl17_iss_is_compared_without_any_normalization(variant: str) -> None:
    p = pending(metadata(authorization_response_iss_parameter_supported=True))
    with pytest.raises(AuthorizationFailed, match="another issuer"):
        parse_callback(p, callback(p, iss=variant))


def test_cl17_error_fields_are_not_acted_on_when_iss_does_not_match() -> None:
    p = pending()
    url = callback(
        p, iss="https://evil.example", error="access_denied", error_description="click here"
    )
    with pytest.raises(AuthorizationFailed) as caught:
        parse_callback(p, url)
    assert caught.value.error == "issuer_mismatch"
    assert "click here" not in str(caught.value)


def test_an_error_response_with_valid_state_is_reported_with_its_code() -> None:
    p = pending()
    with pytest.raises(AuthorizationFailed) as caught:
        parse_callback(p, callback(p, code=None, error="access_denied"))  # type: ignore[arg-type]
    assert caught.value.error == "access_denied"


def test_a_response_without_code_is_refused() -> None:
    p = pending()
    with pytest.raises(AuthorizationFailed, match="no code"):
        parse_callback(p, f"{REDIRECT}?state={p.state}")


def test_pending_authorizations_never_show_the_verifier() -> None:
    p = pending()
    assert p.pkce.verifier not in repr(p)
    assert p.state not in repr(p)
