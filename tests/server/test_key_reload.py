"""Replicas read the signing keys again every ``key_reload_interval`` seconds (5 by default):
a rotation done through another replica is published and used within that long, and not
read from the database on every request before then."""

from __future__ import annotations

from collections.abc import Callable

from mcpauth.server import Settings, create_app
from mcpauth.server.admin import rotate_keys


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_default_reload_interval_is_five_seconds(settings: Settings) -> None:
    assert Settings().key_reload_interval == 5.0
    clock = Clock()
    app = create_app(settings, clock=clock)
    other = create_app(settings, clock=clock)
    keys = other.state.mcpauth.keys
    old = keys.signer().kid
    new = rotate_keys(app.state.mcpauth)["kid"]
    clock.now += 4.9
    assert keys.signer().kid == old
    assert keys.cached_signer() is not None
    clock.now += 0.1
    assert keys.cached_signer() is None  # stale: the next signer() reads the keys again
    assert keys.signer().kid == new


def test_a_rotation_elsewhere_is_picked_up_after_the_configured_interval(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings(key_reload_interval=0.25)
    clock = Clock()
    rotating = create_app(settings, clock=clock)
    replica = create_app(settings, clock=clock)
    keys = replica.state.mcpauth.keys
    old = keys.signer().kid
    new = rotate_keys(rotating.state.mcpauth)["kid"]
    clock.now += 0.2
    assert keys.signer().kid == old
    assert {k["kid"] for k in keys.jwks()["keys"]} == {old}
    clock.now += 0.05
    assert keys.signer().kid == new
    assert {k["kid"] for k in keys.jwks()["keys"]} == {old, new}
