"""A fixed, generated table of malformed URLs, JSON bodies, forms and headers sent to every
endpoint in-process: none may answer 500, and every OAuth endpoint answers an error with the
JSON body of RFC 6749 §5.2 carrying a registered ``error`` code. The authorization endpoint may
only redirect to this server or to the client's registered redirect URI.

The table is built deterministically (no random seed), so a failure reproduces exactly."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from starlette.applications import Starlette

from mcpauth.server import Settings, admin

from ..conftest import ISSUER
from ..oauth import register_public_client

pytestmark = pytest.mark.anyio

OAUTH_ERRORS = frozenset(
    {
        # RFC 6749 §4.1.2.1, §5.2
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
        "unsupported_response_type",
        "invalid_scope",
        "access_denied",
        "temporarily_unavailable",
        "invalid_target",  # RFC 8707 §2
        "invalid_client_metadata",  # RFC 7591 §3.2.2
        "invalid_redirect_uri",
        "invalid_token",  # RFC 6750 §3.1
        "insufficient_scope",
        "too_many_requests",
    }
)
REDIRECT_URI = "http://127.0.0.1/callback"
FORM = "application/x-www-form-urlencoded"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"

MALFORMED_URLS = [
    "http://[::1/cb",
    "https://[::1",
    "https://[x/y",
    "https://[x]/y",
    "https://[::1]:/x",
    "https://xn--zz.example/x",
    "https://xn--.example/x",
    "https://\u2603.example/x",
    "https://a.example:99999/x",
    "https://a.example:-1/x",
    "https://a.example:port/x",
    "https://a.example:1:2/x",
    "http://",
    "https://",
    "https:///x",
    "//evil.example/x",
    "javascript:alert(1)",
    "data:text/html,x",
    "https://u:p@h.example/x",
    "https://h.example/x#f",
    "https://h.example/%zz",
    "https://h.example/\x00",
    "https://h.example/\u2028",
    "https://h.example/" + "a" * 5000,
    "",
    " ",
    "\\\\h.example\\x",
    "http://127.0.0.1:0/callback",
    "http://127.0.0.1:99999/callback",
    "http://[::1]:-1/callback",
    "https://127.0.0.1/x",
    "https://[fe80::1%25eth0]/x",
    "urn:ietf:x",
    "com.example.app:/cb",
    "https://h.example/x?a=1",
]
WEIRD_STRINGS = [
    "",
    "\x00",
    "a\nb",
    '"',
    "\\",
    "\u00e9",
    "\U0001f600",
    "%ff",
    "x" * 3000,
    "a b",
    "=",
    "&",
]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt_like(header: object, payload: object, signature: str = "AAAA") -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}.{signature}"


def _basic(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


GARBAGE_ASSERTIONS = [
    "",
    "a.b.c",
    "not-a-jwt",
    "..",
    _b64(b"\xff") + "." + _b64(b"\xff") + ".x",
    _jwt_like({"alg": "none"}, {"iss": "x"}, ""),
    _jwt_like({"alg": "ES256"}, ["iss"]),
    _jwt_like({"alg": "ES256"}, {"iss": ["x"]}),
    _jwt_like({"alg": "ES256"}, {"iss": 5, "sub": None}),
    *(_jwt_like({"alg": "ES256"}, {"iss": u, "sub": u, "aud": ISSUER}) for u in MALFORMED_URLS),
    _jwt_like({"alg": "ES256", "kid": ["k"]}, {"iss": "x", "aud": [[ISSUER]]}),
    _jwt_like({"alg": ["ES256"]}, {"iss": "x", "aud": {"a": 1}}),
    _jwt_like("header", {"iss": "x"}),
]
AUTHORIZATION_HEADERS = [
    "Basic",
    "Basic ",
    "Basic !!!",
    "Basic " + "=" * 7,
    _basic(b"no-colon"),
    _basic(b"\xff\xfe:\xfd"),
    _basic(b":"),
    _basic(b"https://[::1:secret"),
    _basic(b"%zz:%zz"),
    "Bearer",
    "Bearer " + "x" * 5000,
    "Digest x",
    "basic  Zm9vOmJhcg==",
    "Basic\tZm9vOmJhcg==",
]
BAD_JSON_BODIES: list[bytes] = [
    b"",
    b"{",
    b"[]",
    b"null",
    b"1",
    b'"s"',
    b"\xff\xfe",
    b"\xef\xbb\xbf{}",
    b"[" * 3000 + b"]" * 3000,
    b'{"a": ' * 3000 + b"1" + b"}" * 3000,
    b'{"redirect_uris": NaN}',
    b'{"redirect_uris": Infinity}',
    b'{"client_name": "a", "client_name": "b"}',
    b'{"client_name": "\xff"}',
    b'{"client_name": "\\ud800"}',
]
METADATA_MEMBERS: list[dict[str, Any]] = [
    {"redirect_uris": "x"},
    {"redirect_uris": [1]},
    {"redirect_uris": [None]},
    {"redirect_uris": [["x"]]},
    {"redirect_uris": [{"a": 1}]},
    {"redirect_uris": [REDIRECT_URI] * 50},
    {"grant_types": {"a": 1}},
    {"grant_types": [1]},
    {"grant_types": ["refresh_token"]},
    {"response_types": "code"},
    {"token_endpoint_auth_method": ["none"]},
    {"token_endpoint_auth_method": "private_key_jwt"},
    {"application_type": 1},
    {"client_name": ["x"]},
    {"client_name": "\u2028"},
    {"scope": 5},
    {"scope": ""},
    {"scope": "  "},
    {"scope": "a\x00"},
    {"contacts": [1]},
    {"contacts": ["x" * 300]},
    {"contacts": "x"},
    {"software_id": {}},
    {"jwks": []},
    {"jwks": {"keys": "x"}},
    {"jwks": {"keys": [1]}},
    {"jwks": {"keys": [{"kty": ["EC"]}]}},
    {"jwks": {"keys": [{"kty": "EC", "crv": "P-256", "x": 1, "y": None}]}},
    {"jwks": {"keys": [{"kty": "RSA", "n": "%%", "e": "AQAB"}]}},
    {"jwks": {"keys": [{"kty": "oct", "k": "AAAA"}]}},
    {"jwks_uri": 5},
    {"client_id": "https://[::1", "client_secret": ["x"]},
]


@dataclass
class Case:
    name: str
    method: str
    path: str
    oauth: bool  # answers RFC 6749 §5.2 JSON errors
    params: dict[str, str] | list[tuple[str, str]] | None = None
    data: dict[str, str] | None = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seeded:
    public_id: str
    secret_id: str
    secret: str
    registration_uri: str
    registration_token: str


def _url_fields() -> Iterator[Case]:
    for url in MALFORMED_URLS:
        yield Case(
            f"register redirect_uri {url!r}",
            "POST",
            "/register",
            True,
            content=json.dumps({"redirect_uris": [url], "application_type": "web"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        for name in ("client_uri", "logo_uri", "tos_uri", "policy_uri", "jwks_uri"):
            body = {"redirect_uris": [REDIRECT_URI], name: url}
            yield Case(
                f"register {name} {url!r}",
                "POST",
                "/register",
                True,
                content=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )


def _register_bodies(seeded: Seeded) -> Iterator[Case]:
    json_header = {"Content-Type": "application/json"}
    for body in BAD_JSON_BODIES:
        yield Case(f"register body {body[:40]!r}", "POST", "/register", True, content=body,
                   headers=json_header)  # fmt: skip
    for members in METADATA_MEMBERS:
        body = json.dumps({"redirect_uris": [REDIRECT_URI], **members}).encode()
        yield Case(f"register {members!r}"[:120], "POST", "/register", True, content=body,
                   headers=json_header)  # fmt: skip
    for content_type in ("text/plain", FORM, "application/json; charset=\u00ff", "", "*/*"):
        yield Case(f"register content-type {content_type!r}", "POST", "/register", True,
                   content=b"{}", headers={"Content-Type": content_type})  # fmt: skip
    for length in ("abc", "-1", "99999999999999999999", "1e3", " 5"):
        yield Case(f"register content-length {length!r}", "POST", "/register", True,
                   content=b"{}", headers={**json_header, "Content-Length": length})  # fmt: skip
    # RFC 7592 client configuration
    auth = {"Authorization": f"Bearer {seeded.registration_token}"}
    path = "/" + seeded.registration_uri.split("/", 3)[3]
    for body in BAD_JSON_BODIES[:10]:
        yield Case(f"configure PUT {body[:40]!r}", "PUT", path, True, content=body,
                   headers={**json_header, **auth})  # fmt: skip
    for members in METADATA_MEMBERS[:12]:
        body = json.dumps({"client_id": seeded.public_id, "redirect_uris": [REDIRECT_URI],
                           **members}).encode()  # fmt: skip
        yield Case(f"configure PUT {members!r}"[:120], "PUT", path, True, content=body,
                   headers={**json_header, **auth})  # fmt: skip
    for header in AUTHORIZATION_HEADERS:
        for method in ("GET", "DELETE"):
            yield Case(f"configure {method} {header[:30]!r}", method, path, True,
                       headers={"Authorization": header})  # fmt: skip
    for client_id in ("%ff", "https%3A%2F%2F%5B%3A%3A1", quote("\u2603", safe=""), "x" * 3000):
        yield Case(f"configure GET /register/{client_id[:30]}", "GET",
                   f"/register/{client_id}", True, headers=auth)  # fmt: skip


def _back_channel(seeded: Seeded) -> Iterator[Case]:
    grants: list[dict[str, str]] = [
        {"grant_type": "authorization_code", "code": "x", "code_verifier": "v" * 43},
        {"grant_type": "refresh_token", "refresh_token": "x"},
        {"grant_type": "client_credentials"},
        {"grant_type": JWT_BEARER, "assertion": "x"},
        {"grant_type": "password", "username": "a", "password": "b"},
        {"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange"},
        {"grant_type": "\u00e9"},
        {},
    ]
    for grant, url in itertools.product(grants, MALFORMED_URLS[:18]):
        for name in ("redirect_uri", "resource", "client_id"):
            form = {**grant, "client_id": seeded.public_id, name: url}
            yield Case(f"token {grant.get('grant_type')} {name}={url!r}", "POST", "/token", True,
                       data=form)  # fmt: skip
    for grant, text in itertools.product(grants[:4], WEIRD_STRINGS):
        for name in ("scope", "code", "refresh_token", "code_verifier", "assertion"):
            form = {**grant, "client_id": seeded.public_id, name: text}
            yield Case(f"token {grant.get('grant_type')} {name}={text[:20]!r}", "POST", "/token",
                       True, data=form)  # fmt: skip
    for assertion, grant in itertools.product(GARBAGE_ASSERTIONS, grants[:4]):
        form = {**grant, "client_assertion_type": ASSERTION_TYPE, "client_assertion": assertion}
        yield Case(f"token client_assertion {assertion[:40]!r}", "POST", "/token", True,
                   data=form)  # fmt: skip
        jwt_grant = {"grant_type": JWT_BEARER, "assertion": assertion}
        yield Case(f"token jwt-bearer assertion {assertion[:40]!r}", "POST", "/token", True,
                   data=jwt_grant, headers={"Authorization": _basic(
                       f"{seeded.secret_id}:{seeded.secret}".encode())})  # fmt: skip
    for path in ("/token", "/revoke", "/introspect"):
        form = {"grant_type": "refresh_token", "refresh_token": "x", "token": "x"}
        for header in AUTHORIZATION_HEADERS:
            yield Case(f"{path} Authorization {header[:30]!r}", "POST", path, True, data=form,
                       headers={"Authorization": header})  # fmt: skip
        for url in MALFORMED_URLS:
            yield Case(f"{path} client_id={url!r}", "POST", path, True,
                       data={**form, "client_id": url})  # fmt: skip
        for hint in WEIRD_STRINGS:
            yield Case(f"{path} token_type_hint={hint[:20]!r}", "POST", path, True,
                       data={**form, "client_id": seeded.public_id, "token_type_hint": hint,
                             "token": hint})  # fmt: skip
        for raw in (b"\xff=\xfe", b"a=%ff", b"token=1&token=2", b"=", b"&&&", b"\x00"):
            yield Case(f"{path} raw body {raw!r}", "POST", path, True, content=raw,
                       headers={"Content-Type": FORM})  # fmt: skip
        for content_type in ("application/json", "text/plain", "", "multipart/form-data"):
            yield Case(f"{path} content-type {content_type!r}", "POST", path, True,
                       content=b"token=x", headers={"Content-Type": content_type})  # fmt: skip
        for length in ("abc", "-1", "99999999999999999999"):
            yield Case(f"{path} content-length {length!r}", "POST", path, True,
                       content=b"token=x",
                       headers={"Content-Type": FORM, "Content-Length": length})  # fmt: skip


def _authorize(seeded: Seeded) -> Iterator[Case]:
    good = {
        "client_id": seeded.public_id,
        "redirect_uri": REDIRECT_URI,
        "response_type": "code",
        "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGwSstw-cM",
        "code_challenge_method": "S256",
        "state": "s",
    }
    for url in MALFORMED_URLS:
        for name in ("client_id", "redirect_uri", "resource"):
            yield Case(f"authorize {name}={url!r}", "GET", "/authorize", False,
                       params={**good, name: url})  # fmt: skip
    for text in [*WEIRD_STRINGS, "x" * 2000]:
        for name in ("scope", "state", "code_challenge", "code_challenge_method", "prompt",
                     "response_type"):  # fmt: skip
            yield Case(f"authorize {name}={text[:20]!r}", "GET", "/authorize", False,
                       params={**good, name: text})  # fmt: skip
    yield Case("authorize repeated state", "GET", "/authorize", False,
               params=[*good.items(), ("state", "t")])  # fmt: skip
    for raw in (b"\xff", b"client_id=%ff", b"=", b"a" * 70000):
        yield Case(f"authorize POST {raw[:20]!r}", "POST", "/authorize", False, content=raw,
                   headers={"Content-Type": FORM})  # fmt: skip


def _metadata() -> Iterator[Case]:
    paths = (
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
        "/jwks.json",
        "/health",
    )
    for path in paths:
        for query in ("", "?%ff", "?a=\u2603", "?" + "a" * 5000):
            yield Case(f"GET {path}{query[:20]}", "GET", path + query, False)
        for header in ("application/json;q=x", "\u00ff", "*/*;" * 100):
            yield Case(f"GET {path} Accept {header[:20]!r}", "GET", path, False,
                       headers={"Accept": header})  # fmt: skip
        yield Case(f"OPTIONS {path}", "OPTIONS", path, False,
                   headers={"Origin": "null", "Access-Control-Request-Method": "POST"})  # fmt: skip


def all_cases(seeded: Seeded) -> list[Case]:
    generators: list[Callable[[], Iterator[Case]]] = [
        _url_fields,
        lambda: _register_bodies(seeded),
        lambda: _back_channel(seeded),
        lambda: _authorize(seeded),
        _metadata,
    ]
    return [case for make in generators for case in make()]


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    # Rate limits off, so every case reaches its handler rather than a 429; metadata document
    # hosts of the table are denied, so no case waits on DNS.
    return make_settings(
        rate_limit_token=0,
        rate_limit_authorize=0,
        rate_limit_register=0,
        rate_limit_login=0,
        cimd_deny_hosts=(".example", "127.0.0.1", "::1", "h.example"),
        cimd_timeout=1.0,
    )


@pytest.fixture
async def seeded_clients(seeded: Starlette, http: httpx2.AsyncClient) -> Seeded:
    public = await register_public_client(http, REDIRECT_URI)
    confidential = admin.add_client(
        seeded.state.mcpauth,
        name="Fuzz bot",
        grant_types=["client_credentials"],
        scopes=["mcp:tools"],
    )
    return Seeded(
        public_id=public["client_id"],
        secret_id=confidential["client_id"],
        secret=confidential["client_secret"],
        registration_uri=public["registration_client_uri"],
        registration_token=public["registration_access_token"],
    )


def _problem(case: Case, response: httpx2.Response) -> str | None:
    if response.status_code >= 500:
        return f"{response.status_code}: {response.text[:200]}"
    if response.status_code in (301, 302, 303, 307, 308):
        location = response.headers.get("location", "")
        if not (location.startswith(ISSUER + "/") or location.startswith(REDIRECT_URI + "?")):
            return f"redirects to an unvalidated URI {location[:100]!r}"
    if case.oauth and response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            return f"{response.status_code} without a JSON body: {response.text[:100]!r}"
        if not isinstance(body, dict) or body.get("error") not in OAUTH_ERRORS:
            return f"{response.status_code} with an invalid error body {body!r}"[:200]
    return None


async def test_malformed_input_never_gets_a_500_nor_a_non_oauth_error(
    seeded: Starlette, seeded_clients: Seeded
) -> None:
    cases = all_cases(seeded_clients)
    assert len(cases) >= 200
    problems: list[str] = []
    for index, case in enumerate(cases):
        # a different address per case: client-authentication lockouts would otherwise
        # answer every later case with 429 before it reaches its handler
        address = (f"198.51.{index // 250}.{index % 250 + 1}", 40000)
        transport = httpx2.ASGITransport(app=seeded, client=address, raise_app_exceptions=False)
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as client:
            response = await client.request(
                case.method,
                case.path,
                params=case.params,
                data=case.data,
                content=case.content,
                # raw latin-1 bytes: header values outside ASCII are part of the table
                headers=[(k.encode(), v.encode("latin-1")) for k, v in case.headers.items()],
            )
        if (problem := _problem(case, response)) is not None:
            problems.append(f"{case.name}: {problem}")
    assert problems == [], f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems[:40])


@pytest.mark.parametrize("path", ["/token", "/revoke", "/introspect"])
@pytest.mark.parametrize("header", ["Basic ", "Basic", "Basic !!!", _basic(b"\xff:\xfe")])
async def test_a_basic_header_without_usable_credentials_is_invalid_client(
    seeded: Starlette, http: httpx2.AsyncClient, path: str, header: str
) -> None:
    form = {"grant_type": "refresh_token", "refresh_token": "x", "token": "x"}
    response = await http.post(path, data=form, headers={"Authorization": header})
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


def test_the_table_is_large_and_covers_every_endpoint() -> None:
    seeded = Seeded("p", "s", "secret", f"{ISSUER}/register/p", "t")
    cases = all_cases(seeded)
    assert len(cases) >= 200
    paths = {case.path.split("?")[0] for case in cases}
    for path in ("/authorize", "/token", "/register", "/register/p", "/revoke", "/introspect",
                 "/.well-known/oauth-authorization-server", "/jwks.json"):  # fmt: skip
        assert path in paths
    grants = {(case.data or {}).get("grant_type") for case in cases if case.path == "/token"}
    assert {"authorization_code", "refresh_token", "client_credentials", JWT_BEARER} <= grants
