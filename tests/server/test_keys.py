"""Signing keys: public parts only in the JWKS, private parts encrypted at rest, rotation
publishes the next key before it signs and keeps the old one until its tokens expire."""

from __future__ import annotations

import httpx2
import pytest
from freezegun import freeze_time
from sqlmodel import select
from starlette.applications import Starlette

from mcpauth.server import Settings, create_app
from mcpauth.server.admin import list_keys, rotate_keys
from mcpauth.server.storage.models import SigningKey

pytestmark = pytest.mark.anyio
PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi"}


async def test_jwks_holds_public_keys_only(http: httpx2.AsyncClient) -> None:
    jwks = (await http.get("/jwks.json")).json()
    assert len(jwks["keys"]) == 1
    key = jwks["keys"][0]
    assert not PRIVATE_MEMBERS & set(key)
    assert key["alg"] == "ES256"
    assert key["kid"]
    assert key["use"] == "sig"


def test_private_keys_are_encrypted_at_rest(app: Starlette) -> None:
    with app.state.mcpauth.db.read() as session:
        row = session.exec(select(SigningKey)).one()
    assert "PRIVATE KEY" not in row.private_key
    assert row.private_key.startswith("gAAAA")  # Fernet token


@pytest.mark.parametrize(("alg", "kty"), [("RS256", "RSA"), ("EdDSA", "OKP"), ("ES256", "EC")])
def test_signing_algorithm_is_selectable(settings: Settings, alg: str, kty: str) -> None:
    app = create_app(settings.model_copy(update={"signing_alg": alg}))
    jwks = app.state.mcpauth.keys.jwks()
    assert jwks["keys"][0]["kty"] == kty


def test_rotation_publishes_both_keys_and_signs_with_the_new_one_after_the_delay(
    settings: Settings,
) -> None:
    with freeze_time("2026-01-01 00:00:00") as frozen:
        app = create_app(settings.model_copy(update={"key_rotation_delay": 120}))
        ctx = app.state.mcpauth
        old = ctx.keys.signer().kid
        new = rotate_keys(ctx)["kid"]
        assert {k["kid"] for k in ctx.keys.jwks()["keys"]} == {old, new}
        assert ctx.keys.signer().kid == old  # not yet: clients must see the key first
        states = {k["kid"]: k["state"] for k in list_keys(ctx)}
        assert states == {old: "active", new: "next"}
        frozen.tick(121)
        assert ctx.keys.signer().kid == new
        frozen.tick(settings.access_token_ttl + 60)
        assert {k["kid"] for k in ctx.keys.jwks()["keys"]} == {new}
