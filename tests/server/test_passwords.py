"""Password hashing: argon2id at RFC 9106's low-memory cost unless the settings lower it (the
tests do), nothing hashed at import, and a missing user costs one verification at the
configured cost."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcpauth.server import Settings
from mcpauth.server.config import load_settings
from mcpauth.server.context import build_context
from mcpauth.server.identity.passwords import Passwords, hash_password, passwords_at
from mcpauth.server.storage.database import make_engine

PRODUCTION = "$argon2id$v=19$m=65536,t=3,p=4$"


def test_the_default_settings_hash_at_the_production_cost(tmp_path: pytest.TempPathFactory) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/db.sqlite", secret_key="s" * 32)
    engine = make_engine(settings.database_url)
    try:
        passwords = build_context(settings, engine).passwords
    finally:
        engine.dispose()
    assert (passwords.time_cost, passwords.memory_cost) == (3, 65536)
    assert passwords.hash("correct horse battery").startswith(PRODUCTION)
    assert hash_password("correct horse battery").startswith(PRODUCTION)


def test_the_cost_comes_from_the_settings_and_the_environment() -> None:
    settings = load_settings(
        environ={"MCPAUTH_PASSWORD_HASH_TIME_COST": "2", "MCPAUTH_PASSWORD_HASH_MEMORY_COST": "64"}
    )
    assert (settings.password_hash_time_cost, settings.password_hash_memory_cost) == (2, 64)
    passwords = passwords_at(settings.password_hash_time_cost, settings.password_hash_memory_cost)
    assert passwords.hash("correct horse battery").startswith("$argon2id$v=19$m=64,t=2,p=4$")
    assert passwords_at(2, 64) is passwords  # one hasher (and one dummy hash) per cost


def test_a_hash_verifies_at_its_own_cost_whatever_the_hasher() -> None:
    cheap, other = Passwords(time_cost=1, memory_cost=32), Passwords(time_cost=2, memory_cost=64)
    stored = cheap.hash("correct horse battery")
    assert other.verify_sync("correct horse battery", stored)
    assert not other.verify_sync("wrong horse battery", stored)
    assert not other.verify_sync("correct horse battery", "not a hash")


def test_a_missing_user_is_verified_against_a_dummy_hash_at_the_configured_cost() -> None:
    passwords = Passwords(time_cost=2, memory_cost=64)
    assert passwords._dummy_hash is None  # made on first use
    assert not passwords.verify_sync("mcpauth-timing-equaliser", None)
    assert passwords._dummy_hash is not None
    assert passwords._dummy_hash.startswith("$argon2id$v=19$m=64,t=2,p=4$")


def test_importing_the_server_hashes_nothing() -> None:
    code = (
        "import argon2\n"
        "def refuse(*args, **kwargs):\n"
        "    raise SystemExit('hashed at import')\n"
        "argon2.PasswordHasher.hash = refuse\n"
        "import mcpauth.server, mcpauth.server.admin, mcpauth.server.browser.login, mcpauth.cli\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
