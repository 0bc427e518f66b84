"""The claims of a person's account (docs/upstream-providers.md, docs/security.md T34): the
groups of an upstream sign-in (an OpenID provider's ID token ``groups``, a plain OAuth 2.0
provider's through its ``claim_mapping``, never GitHub's) are kept with the identity, bounded,
and replaced at each sign-in, emptied when the provider stops sending them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from starlette.applications import Starlette

from mcpauth.server.config import UpstreamProvider
from mcpauth.server.identity import accounts, user_apis
from mcpauth.server.storage.models import UpstreamIdentity

from .test_upstream_sign_in import (  # noqa: F401 - fixtures used by name
    browser_for,
    client_id,
    clock,
    come_back,
    idp,
    make_app,
    other_idp,
    start,
)
from .upstream_fake import FakeProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def app(make_app: Callable[..., Starlette]) -> Starlette:  # noqa: F811
    return make_app()


def identity(app: Starlette) -> UpstreamIdentity:
    with app.state.mcpauth.db.read() as session:
        (found,) = session.execute(select(UpstreamIdentity)).scalars()
    return found


async def upstream_sign_in(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    **claims: Any,
) -> None:
    """Alice signs in through the provider in a browser of her own, with these claims."""
    async with await browser_for(app) as browser:
        _, url = await start(browser, client_id)
        back = await come_back(browser, idp.approve(url, **claims))
        assert back.status_code == 303, back.text


# --------------------------------------------------------------------------------------------
# groups, kept with the identity


async def test_groups_are_kept_and_replaced_at_each_sign_in_then_emptied(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    await upstream_sign_in(app, client_id, idp, groups=["mcp-users", "admins"])
    assert identity(app).groups == ["mcp-users", "admins"]
    await upstream_sign_in(app, client_id, idp, groups=["mcp-users"])
    assert identity(app).groups == ["mcp-users"]  # admins was taken away at the provider
    await upstream_sign_in(app, client_id, idp, groups="readers")  # one string: one group
    assert identity(app).groups == ["readers"]
    await upstream_sign_in(app, client_id, idp)  # no groups claim any more
    assert identity(app).groups == []


async def test_oversized_groups_keep_the_first_hundred_and_warn_without_naming_any(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    bad = [7, "", "g" * 256, "tab\there", None, {"name": "x"}]
    sent = [*bad, *(f"team-{n:03d}" for n in range(150)), "team-000"]
    await upstream_sign_in(app, client_id, idp, groups=sent)
    assert identity(app).groups == [f"team-{n:03d}" for n in range(100)]
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("mcpauth")]
    assert "upstream idp: 150 groups sent, the first 100 kept" in logged
    assert any("upstream idp: 6 of 157 groups left out" in message for message in logged)
    assert not any("team-" in message or "ggg" in message for message in logged)


async def test_a_groups_claim_that_is_no_list_of_strings_keeps_none(
    app: Starlette,
    client_id: str,  # noqa: F811
    idp: FakeProvider,  # noqa: F811
) -> None:
    await upstream_sign_in(app, client_id, idp, groups=["a"])
    await upstream_sign_in(app, client_id, idp, groups={"a": True})
    assert identity(app).groups == []


def plain_provider(kind: str, **extra: Any) -> UpstreamProvider:
    endpoints = {
        "authorization_endpoint": "https://forge.example/authorize",
        "token_endpoint": "https://forge.example/token",
        "userinfo_endpoint": "https://forge.example/user",
    }
    return UpstreamProvider.model_validate(
        {
            "id": kind,
            "name": kind,
            "kind": kind,
            "issuer": "https://forge.example",
            "client_id": "c",
            **(endpoints if kind == "oauth2" else {}),
            **extra,
        }
    )


def test_an_oauth2_provider_s_groups_come_through_its_claim_mapping_and_github_has_none() -> None:
    answer = {"id": 5, "groups": ["top"], "org": {"teams": ["nested", 3]}}
    mapped = plain_provider("oauth2", claim_mapping={"subject": "id", "groups": "org.teams"})
    kept = accounts.admit(mapped, user_apis.mapped_claims(mapped, answer))
    assert kept.groups == ("nested",)
    default = plain_provider("oauth2", claim_mapping={"subject": "id"})  # field `groups`
    assert accounts.admit(default, user_apis.mapped_claims(default, answer)).groups == ("top",)
    github = plain_provider("github")
    claims = user_apis.github_claims(github.issuer, {**answer, "login": "octo"}, None)
    assert claims["groups"] == ["top"]  # a top-level field, for required_claims only
    assert accounts.admit(github, claims).groups == ()
