"""Every string a request can put in a column has a ceiling, checked before anything is written
(docs/security.md T33): an over-long value gets the precise error (``invalid_client_metadata``,
``invalid_redirect_uri``, ``invalid_request``, ``invalid_scope``, ``invalid_target``,
``invalid_grant``; a page for people), never a 500, and adds or changes no row. A table of every
string column says where its ceiling comes from and checks that the ceiling fits the column, so
a new column cannot be added without one. Runs on SQLite and PostgreSQL (where a value longer
than its column would be a database error)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from sqlalchemy import JSON, String, func, select
from starlette.applications import Starlette
from webauthn.helpers import bytes_to_base64url

from mcpauth import jwt
from mcpauth.server import Settings, admin, create_app
from mcpauth.server.clients.records import MAX_NAME
from mcpauth.server.clients.ssrf import FetchedResponse
from mcpauth.server.identity.accounts import MAX_EMAIL
from mcpauth.server.identity.accounts import MAX_NAME as MAX_UPSTREAM_NAME
from mcpauth.server.identity.passkeys import MAX_CREDENTIAL_ID, MAX_CREDENTIAL_JSON
from mcpauth.server.operations import size_limits as limits
from mcpauth.server.storage.models import (
    Client,
    Interaction,
    RateCounter,
    Throttle,
    UsedAssertion,
    User,
    metadata,
)
from mcpauth.server.storage.upstream_tokens import MAX_SEALED_LENGTH

from ..conftest import ISSUER
from ..oauth import authorization_params, follow, forms, pkce_pair, register_public_client, submit
from .conftest import RESOURCE

pytestmark = [pytest.mark.anyio, pytest.mark.every_engine]  # storage: on both engines

NAME = "n" * (limits.MAX_NAME_LENGTH + 1)
WEB_URI = "https://app.example.com/" + "a" * limits.MAX_URI_LENGTH
LOOPBACK_URI = "http://127.0.0.1/" + "a" * limits.MAX_URI_LENGTH
SCOPE = " ".join(["mcp:tools"] * (limits.MAX_SCOPE_LENGTH // 10 + 1))
DOCUMENT_URL = "https://app.example.com/oauth/client.json"
IDP = "https://idp.example"
IDP_KEY = jwt.generate_private_key("ES256")
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"

# Where each string column's value comes from, and so what bounds it: a number is the limit
# checked on the request before the value is stored; a word says why no request can make the
# value long ("server": the server makes it; "digest": a SHA-256 hex digest; "choice": one of
# a fixed set; "operator": the administrator's input, never a request's; "copy": copied from a
# column listed here, or a list of values each checked as this table says; "body": a JSON
# document whose whole size the request body limit bounds).
CEILINGS: dict[str, int | str] = {
    "users.id": "server",
    "users.username": limits.MAX_USERNAME_LENGTH,  # an upstream iss#sub; else operator
    "users.password_hash": "server",
    "clients.client_id": limits.MAX_CLIENT_ID_URL_LENGTH,  # or a server-made id
    "clients.secret_digest": "digest",
    "clients.client_name": limits.MAX_NAME_LENGTH,
    "clients.redirect_uris": "copy",  # MAX_REDIRECT_URIS of MAX_URI_LENGTH
    "clients.grant_types": "choice",
    "clients.response_types": "choice",
    "clients.token_endpoint_auth_method": "choice",
    "clients.application_type": "choice",
    "clients.scope": limits.MAX_SCOPE_LENGTH,
    "clients.jwks": "body",
    "clients.jwks_uri": limits.MAX_URI_LENGTH,
    "clients.client_metadata": "body",
    "clients.registration_token_digest": "digest",
    "clients.source": "choice",
    "resources.uri": "operator",
    "resources.name": "operator",
    "resources.scopes": "operator",
    "resources.default_scopes": "operator",
    "resources.token_claims": "choice",  # of email, email_verified, name, groups
    "signing_keys.kid": "server",
    "signing_keys.alg": "choice",
    "signing_keys.public_jwk": "server",
    "signing_keys.private_key": "server",
    "grants.id": "server",
    "grants.user_id": "copy",
    "grants.client_id": "copy",
    "grants.resource": "copy",  # a registered resource's uri
    "grants.scope": "copy",  # at most MAX_SCOPES of a resource's scopes
    "authorization_codes.digest": "digest",
    "authorization_codes.grant_id": "copy",
    "authorization_codes.client_id": "copy",
    "authorization_codes.user_id": "copy",
    "authorization_codes.redirect_uri": limits.MAX_URI_LENGTH + len(":65535"),  # loopback port
    "authorization_codes.code_challenge": 43,  # S256 only (RFC 7636 §4.2)
    "authorization_codes.resource": "copy",
    "authorization_codes.scope": "copy",
    "refresh_tokens.digest": "digest",
    "refresh_tokens.grant_id": "copy",
    "refresh_tokens.client_id": "copy",
    "refresh_tokens.scope": "copy",
    "refresh_tokens.resource": "copy",
    "authorization_codes.dpop_jkt": "digest",  # an RFC 7638 thumbprint, as below
    "authorization_codes.nonce": limits.MAX_NONCE_LENGTH,
    "refresh_tokens.dpop_jkt": "digest",  # an RFC 7638 thumbprint: base64url SHA-256, 43
    "consents.user_id": "copy",
    "consents.client_id": "copy",
    "consents.resource": "copy",
    "consents.scope": "copy",
    "consents.redirect_uri": limits.MAX_URI_LENGTH + len(":65535"),
    "consents.client_name": MAX_NAME,  # the name as the consent page showed it
    "browser_sessions.digest": "digest",
    "browser_sessions.user_id": "copy",
    "interactions.id": "server",
    "interactions.request": "copy",  # state: MAX_STATE_LENGTH; the rest as in the code's row
    # "client-at:<digest of the client id>:<address_in_key>", the longest key
    "throttles.key": len("client-at:") + 32 + 1 + limits.MAX_ADDRESS_LENGTH,
    "revoked_access_tokens.jti": "server",  # only of tokens this server signed
    "used_assertions.key": "digest",
    "rate_counters.key": "operator",  # rate:<issuer path>/<route>:ip:<address_in_key>
    # sign-in through upstream OpenID providers (the provider's values are the operator's)
    "upstream_identities.issuer": "operator",
    "upstream_identities.subject": limits.MAX_SUBJECT_LENGTH,  # a longer ID token sub is refused
    "upstream_identities.user_id": "copy",
    "upstream_identities.provider_id": "operator",
    "upstream_identities.email": MAX_EMAIL,  # a longer email claim is kept as none
    "upstream_identities.name": MAX_UPSTREAM_NAME,  # a longer name claim is cut
    "upstream_identities.groups": "copy",  # MAX_GROUPS names of at most MAX_GROUP characters
    "upstream_tokens.user_id": "copy",
    "upstream_tokens.provider_id": "operator",
    "upstream_tokens.sealed": MAX_SEALED_LENGTH,  # longer upstream tokens are not kept
    "upstream_logins.digest": "digest",
    "upstream_logins.provider_id": "operator",
    "upstream_logins.interaction_id": "copy",
    "upstream_logins.session_digest": "digest",
    # the device grant (RFC 8628): digests, and copies of what /device_authorization checked
    "device_authorizations.digest": "digest",
    "device_authorizations.user_code_digest": "digest",  # an HMAC-SHA256, hex
    "device_authorizations.client_id": "copy",
    "device_authorizations.resource": "copy",  # a registered resource's uri
    "device_authorizations.scope": "copy",  # at most MAX_SCOPES of a resource's scopes
    "device_authorizations.status": len("approved"),  # pending | approved | denied
    "device_authorizations.user_id": "copy",
    "device_authorizations.grant_id": "server",
    # second factors
    "grants.amr": "server",  # RFC 8176 values of identity/methods.py
    "browser_sessions.amr": "server",
    "totp_factors.user_id": "copy",
    "totp_factors.sealed": "server",  # a sealed 32-character secret
    "recovery_codes.digest": "digest",
    "recovery_codes.user_id": "copy",
    # a longer credential id is refused when registered (WebAuthn §6.5.1: 1023 bytes)
    "passkeys.credential_id": len(bytes_to_base64url(bytes(MAX_CREDENTIAL_ID))),
    "passkeys.user_id": "copy",
    "passkeys.public_key": MAX_CREDENTIAL_JSON,  # within the posted credential, capped whole
    "passkeys.name": "server",
    "pending_sign_ins.digest": "digest",
    "pending_sign_ins.user_id": "copy",
    "pending_sign_ins.amr": "server",
    "pending_sign_ins.interaction_id": "copy",
    # the audit trail: every value cut to its column by operations/audit_trail.row_of
    "audit_events.event": "server",
    "audit_events.user_id": "server",
    "audit_events.username": "server",
    "audit_events.client_id": "server",
    "audit_events.actor": "server",
    "audit_events.request_id": "server",
    "audit_events.details": "server",  # up to 20 fields of 64 + 200 characters
}


def stored_type(column: Any) -> Any:
    """The database type (SQLModel's AutoString is a decorator around String)."""
    return getattr(column.type, "impl", column.type)


def test_every_string_column_has_a_ceiling_that_fits_it() -> None:
    columns = {
        f"{table.name}.{column.name}": column
        for table in metadata.sorted_tables
        if table.name != "alembic_version"
        for column in table.columns
        if isinstance(column.type, JSON) or isinstance(stored_type(column), String)
    }
    assert set(CEILINGS) == set(columns), "say where each new string column's ceiling comes from"
    for name, ceiling in CEILINGS.items():
        length = getattr(stored_type(columns[name]), "length", None)
        if isinstance(ceiling, int) and length is not None:
            assert ceiling <= length, f"{name}: a {ceiling}-character value does not fit"
    assert len(limits.address_in_key("x" * 1000)) <= limits.MAX_ADDRESS_LENGTH
    assert limits.address_in_key("192.0.2.1") == "192.0.2.1"
    assert limits.address_in_key("2001:db8::1") == "2001:db8::/64"  # an IPv6 caller's network
    widest = limits.address_in_key("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
    assert len(widest) <= limits.MAX_ADDRESS_LENGTH


def rows(app: Starlette, model: type) -> int:
    with app.state.mcpauth.db.read() as session:
        return int(session.exec(select(func.count()).select_from(model)).one()[0])


def registration(**members: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "client_name": "Size test",
        "redirect_uris": ["http://127.0.0.1/callback"],
        "token_endpoint_auth_method": "none",
    }
    body.update(members)
    return body


# (members, error, what the description names)
METADATA_CASES = [
    ({"client_name": NAME}, "invalid_client_metadata", "client_name: longer than 200"),
    ({"software_id": NAME}, "invalid_client_metadata", "software_id: longer than 200"),
    ({"software_version": NAME}, "invalid_client_metadata", "software_version: longer than 200"),
    ({"contacts": ["ops@example.com", NAME]}, "invalid_client_metadata", "contacts: entries"),
    ({"contacts": ["a@example.com"] * 11}, "invalid_client_metadata", "contacts: more than 10"),
    ({"client_uri": WEB_URI}, "invalid_client_metadata", "client_uri: longer than 2000"),
    ({"logo_uri": WEB_URI}, "invalid_client_metadata", "logo_uri: longer than 2000"),
    ({"tos_uri": WEB_URI}, "invalid_client_metadata", "tos_uri: longer than 2000"),
    ({"policy_uri": WEB_URI}, "invalid_client_metadata", "policy_uri: longer than 2000"),
    (
        {"jwks_uri": WEB_URI, "token_endpoint_auth_method": "private_key_jwt"},
        "invalid_client_metadata",
        "jwks_uri: longer than 2000",
    ),
    ({"scope": SCOPE}, "invalid_client_metadata", "scope: longer than 2000"),
    ({"redirect_uris": [LOOPBACK_URI]}, "invalid_redirect_uri", "longer than 2000"),
    (
        {"redirect_uris": [f"http://127.0.0.1/{n}" for n in range(21)]},
        "invalid_client_metadata",
        "redirect_uris: more than 20",
    ),
    ({"application_type": NAME}, "invalid_client_metadata", "application_type: longer than"),
    (
        {"token_endpoint_auth_method": NAME},
        "invalid_client_metadata",
        "token_endpoint_auth_method: longer than",
    ),
]
IDS = [next(iter(members)) + f"-{i}" for i, (members, _, _) in enumerate(METADATA_CASES)]


@pytest.mark.parametrize(("members", "error", "named"), METADATA_CASES, ids=IDS)
async def test_an_over_long_registration_member_is_refused_and_registers_nothing(
    seeded: Starlette, http: httpx2.AsyncClient, members: dict[str, Any], error: str, named: str
) -> None:
    before = rows(seeded, Client)
    response = await http.post("/register", json=registration(**members))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error
    assert named in response.json()["error_description"]
    assert rows(seeded, Client) == before


@pytest.mark.parametrize(("members", "error", "named"), METADATA_CASES, ids=IDS)
async def test_an_over_long_member_in_an_rfc_7592_update_is_refused_and_changes_nothing(
    seeded: Starlette, http: httpx2.AsyncClient, members: dict[str, Any], error: str, named: str
) -> None:
    client = await register_public_client(http)
    headers = {"Authorization": f"Bearer {client['registration_access_token']}"}
    with seeded.state.mcpauth.db.read() as session:
        stored = session.get(Client, client["client_id"])
        assert stored is not None
        before = stored.model_dump()
    body = registration(client_id=client["client_id"], **members)
    response = await http.put(client["registration_client_uri"], json=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error
    assert named in response.json()["error_description"]
    with seeded.state.mcpauth.db.read() as session:
        stored = session.get(Client, client["client_id"])
        assert stored is not None
        assert stored.model_dump() == before  # not even the registration token rotated


class Publisher:
    """Serves one client metadata document in place of the client's web site."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    async def __call__(self, url: str, address: str) -> FetchedResponse:
        headers = httpx2.Headers({"content-type": "application/json"})
        return FetchedResponse(url, 200, headers, json.dumps(self.document).encode())


DOCUMENT_CASES = [
    ({"client_name": NAME}, "client_name: longer than 200"),
    ({"redirect_uris": [LOOPBACK_URI]}, "longer than 2000"),
    ({"logo_uri": WEB_URI}, "logo_uri: longer than 2000"),
    ({"client_id": DOCUMENT_URL + "/" + "a" * 2048}, "longer than 2048"),
]


@pytest.mark.parametrize(("changes", "named"), DOCUMENT_CASES, ids=lambda c: str(c)[:20])
async def test_an_over_long_metadata_document_member_is_refused_on_a_page_and_stores_nothing(
    seeded: Starlette,
    http: httpx2.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    changes: dict[str, Any],
    named: str,
) -> None:
    document = {
        "client_id": DOCUMENT_URL,
        "client_name": "Document client",
        "redirect_uris": ["http://127.0.0.1/callback"],
        **changes,
    }
    monkeypatch.setattr(seeded.state.mcpauth.clients, "_fetch", Publisher(document))
    before = rows(seeded, Client)
    _, challenge = pkce_pair()
    params = authorization_params(document["client_id"], challenge)
    response = await http.get("/authorize", params=params)
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "invalid_client" in response.text
    assert named in response.text
    assert rows(seeded, Client) == before
    assert rows(seeded, Interaction) == 0


@pytest.mark.parametrize(
    ("changes", "error", "named"),
    [
        ({"state": "s" * (limits.MAX_STATE_LENGTH + 1)}, "invalid_request", "longer than 1024"),
        ({"redirect_uri": LOOPBACK_URI}, "invalid_request", "is not registered"),
        ({"code_challenge": "c" * 4000}, "invalid_request", "43 base64url characters"),
        (
            {"scope": " ".join(f"s{n}" for n in range(limits.MAX_SCOPES + 1))},
            "invalid_scope",
            "at most 50 scopes",
        ),
        ({"resource": "http://127.0.0.1:8000/" + "r" * 4000}, "invalid_target", "not served"),
        ({"client_id": "c" * 4000}, "invalid_client", "does not know the application"),
        ({"prompt": "p" * 4000}, "invalid_request", "prompt must be"),
        (
            {"scope": "openid", "nonce": "n" * (limits.MAX_NONCE_LENGTH + 1)},
            "invalid_request",
            "nonce must not be longer than 255",
        ),
    ],
    ids=lambda c: str(c)[:16],
)
async def test_an_over_long_authorization_parameter_is_refused_and_stores_no_interaction(
    public_client: dict[str, Any],
    seeded: Starlette,
    http: httpx2.AsyncClient,
    changes: dict[str, str],
    error: str,
    named: str,
) -> None:
    _, challenge = pkce_pair()
    params = {**authorization_params(public_client["client_id"], challenge), **changes}
    response = await http.get("/authorize", params=params)
    # a self-registered client's errors are shown on a page (RFC 9700 §4.11.2), never a 500
    assert response.status_code == 400, response.text
    assert error in response.text
    assert named in response.text
    assert rows(seeded, Interaction) == 0


@pytest.mark.parametrize(
    ("username", "password", "named"),
    [
        ("u" * (limits.MAX_USERNAME_LENGTH + 1), "whatever-password", "username is longer than"),
        ("alice", "p" * (limits.MAX_PASSWORD_LENGTH + 1), "password is longer than"),
    ],
    ids=["username", "password"],
)
async def test_an_over_long_sign_in_is_answered_on_the_form_and_counts_nothing(
    public_client: dict[str, Any],
    seeded: Starlette,
    http: httpx2.AsyncClient,
    username: str,
    password: str,
    named: str,
) -> None:
    _, challenge = pkce_pair()
    params = authorization_params(public_client["client_id"], challenge)
    page = await follow(http, await http.get("/authorize?" + urlencode(params)))
    assert "password" in forms(page.text)[0].fields
    throttles = rows(seeded, Throttle)
    answer = await submit(http, page, {"username": username, "password": password})
    assert answer.status_code == 200
    assert named in answer.text
    assert "password" in forms(answer.text)[0].fields  # the form again, not signed in
    assert rows(seeded, Throttle) == throttles


@pytest.fixture
def idp_app(make_settings: Callable[..., Settings], seeded: Starlette) -> Starlette:
    jwks = {"keys": [jwt.public_jwk(IDP_KEY.public_key(), kid="idp-1", alg="ES256")]}
    app = create_app(make_settings(trusted_idps={IDP: json.dumps(jwks)}))
    return app  # the same database as ``seeded``: its resource is there


@pytest.fixture
async def idp_http(idp_app: Starlette) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=idp_app, client=("203.0.113.7", 50000))
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as client:
        yield client


def id_jag(client_id: str, subject: str, jti: str) -> str:
    now = int(time.time())
    claims = {
        "iss": IDP,
        "sub": subject,
        "aud": ISSUER,
        "client_id": client_id,
        "resource": RESOURCE,
        "jti": jti,
        "iat": now,
        "exp": now + 300,
        "scope": "mcp:tools",
    }
    return jwt.encode(claims, IDP_KEY, alg="ES256", kid="idp-1", typ="oauth-id-jag+jwt")


async def test_an_id_jag_subject_past_its_limit_is_invalid_grant_and_stores_nothing(
    idp_app: Starlette, idp_http: httpx2.AsyncClient
) -> None:
    agent = admin.add_client(idp_app.state.mcpauth, name="Agent", grant_types=[JWT_BEARER])
    auth = (agent["client_id"], agent["client_secret"])
    users, used = rows(idp_app, User), rows(idp_app, UsedAssertion)
    too_long = id_jag(agent["client_id"], "s" * (limits.MAX_SUBJECT_LENGTH + 1), "j0")
    data = {"grant_type": JWT_BEARER, "assertion": too_long}
    response = await idp_http.post("/token", data=data, auth=auth)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_grant"
    assert "sub is longer than 255" in response.json()["error_description"]
    assert (rows(idp_app, User), rows(idp_app, UsedAssertion)) == (users, used)


async def test_an_id_jag_subject_too_long_for_iss_hash_sub_maps_to_one_digested_user(
    idp_app: Starlette, idp_http: httpx2.AsyncClient
) -> None:
    agent = admin.add_client(idp_app.state.mcpauth, name="Agent", grant_types=[JWT_BEARER])
    auth = (agent["client_id"], agent["client_secret"])
    keys = jwt.key_set(idp_app.state.mcpauth.keys.jwks())
    subject = "t" * limits.MAX_SUBJECT_LENGTH  # allowed, but "iss#sub" would not fit
    subjects = []
    for jti in ("j1", "j2"):
        data = {"grant_type": JWT_BEARER, "assertion": id_jag(agent["client_id"], subject, jti)}
        answer = await idp_http.post("/token", data=data, auth=auth)
        assert answer.status_code == 200, answer.text
        token = answer.json()["access_token"]
        subjects.append(jwt.verify(token, keys, issuer=ISSUER, audience=RESOURCE)["sub"])
    assert subjects[0] == subjects[1]  # the same person maps to the same local user
    with idp_app.state.mcpauth.db.read() as session:
        user = session.get(User, subjects[0])
    assert user is not None
    assert len(user.username) <= limits.MAX_USERNAME_LENGTH
    assert user.username.startswith(f"{IDP}#sha256:")


async def test_an_over_long_forwarded_address_keeps_throttle_and_rate_keys_in_their_columns(
    make_settings: Callable[..., Settings],
) -> None:
    moment = [time.time()]
    app = create_app(make_settings(trusted_proxies=("203.0.113.7",)), clock=lambda: moment[0])
    admin.add_resource(app.state.mcpauth, RESOURCE, scopes=["a"], default_scopes=["a"])
    bot = admin.add_client(app.state.mcpauth, name="bot", grant_types=["client_credentials"])
    transport = httpx2.ASGITransport(app=app, client=("203.0.113.7", 50000))
    forwarded = {"X-Forwarded-For": "f" * 400}  # a proxy that passed the header on unchecked
    async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
        for _ in range(3):  # each request writes the rate counts of the one before
            response = await http.post(
                "/token",
                data={"grant_type": "client_credentials"},
                auth=(bot["client_id"], "wrong"),
                headers=forwarded,
            )
            assert response.status_code == 401, response.text
            assert response.json()["error"] == "invalid_client"
            moment[0] += 2  # past the rate limiter's sync interval
    with app.state.mcpauth.db.read() as session:
        keys = list(session.exec(select(Throttle.key)).scalars())
        keys += session.exec(select(RateCounter.key)).scalars()
    assert any(key.startswith("client-ip:sha256:") for key in keys), keys
    assert any(":ip:sha256:" in key for key in keys), keys
    assert all(len(key) <= 300 and "f" * 65 not in key for key in keys)
