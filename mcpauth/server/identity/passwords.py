"""argon2id password hashing; verification runs in a worker thread, off the event loop."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from mcpauth.server.threads import run_blocking

_hasher = PasswordHasher()  # argon2id, RFC 9106 low-memory profile defaults
# Verified against when the user does not exist, so both paths cost the same.
_DUMMY_HASH = _hasher.hash("mcpauth-timing-equaliser")


def hash_password(password: str) -> str:
    return str(_hasher.hash(password))


def verify_password_sync(password: str, password_hash: str | None) -> bool:
    try:
        return bool(_hasher.verify(password_hash or _DUMMY_HASH, password)) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False


async def verify_password(password: str, password_hash: str | None) -> bool:
    """True if ``password`` matches; a missing user costs one verification all the same."""
    return await run_blocking(verify_password_sync, password, password_hash)
