"""``Admin`` returns typed values: each result has exactly the keys its ``TypedDict`` declares
(the optional ones only when they apply), so the type a caller checks against is the JSON the
commands print."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NotRequired, get_origin, get_type_hints

from mcpauth.server import (
    Admin,
    ClientInfo,
    ClientListing,
    KeyInfo,
    ResourceInfo,
    RotatedKey,
    Settings,
    UserInfo,
    UserListing,
)


def assert_shape(value: Mapping[str, Any], kind: Any, **optional_present: bool) -> None:
    hints = get_type_hints(kind, include_extras=True)
    required = {key for key, hint in hints.items() if get_origin(hint) is not NotRequired}
    declared = set(hints)
    expected = required | {k for k, on in optional_present.items() if on}
    assert set(value) <= declared, set(value) - declared
    assert set(value) == expected, set(value) ^ expected


def test_each_admin_result_has_the_keys_of_its_type(
    make_settings: Callable[..., Settings],
) -> None:
    with Admin.open(make_settings()) as admin:
        assert_shape(admin.add_user("alice", "correct horse battery"), UserInfo)
        assert_shape(admin.list_users()[0], UserListing)
        resource = admin.add_resource("https://mcp.example.com/mcp", scopes=["mcp:tools"])
        assert_shape(resource, ResourceInfo)
        assert_shape(admin.list_resources()[0], ResourceInfo)
        machine = admin.add_client(
            name="nightly", grant_types=["client_credentials"], scopes=["mcp:tools"]
        )
        assert_shape(
            machine,
            ClientInfo,
            client_secret=True,
            client_secret_expires_at=True,
            client_name=True,
            scope=True,
        )
        public = admin.add_client(
            name="cli", redirect_uris=["http://127.0.0.1/callback"], auth_method="none"
        )
        assert_shape(public, ClientInfo, client_name=True)
        assert_shape(admin.list_clients()[0], ClientListing)
        assert_shape(admin.rotate_keys(), RotatedKey)
        keys = admin.list_keys()
        assert {key["state"] for key in keys} <= {"next", "active", "retired", "expired"}
        assert_shape(keys[0], KeyInfo)
