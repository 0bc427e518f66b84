"""argon2id password hashing at the cost the settings ask for; verification runs in a worker
thread, off the event loop. Nothing is hashed until a password is first checked."""

from __future__ import annotations

import functools
import threading

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from mcpauth.server.threads import run_blocking

# RFC 9106 §4 low-memory profile (argon2-cffi's defaults): 64 MiB, 3 passes, 4 lanes
DEFAULT_TIME_COST = 3
DEFAULT_MEMORY_COST = 64 * 1024  # KiB


class Passwords:
    """Hashes and verifies passwords with argon2id at one cost (``time_cost`` passes over
    ``memory_cost`` KiB); a hash made at another cost still verifies, at its own cost."""

    def __init__(
        self, *, time_cost: int = DEFAULT_TIME_COST, memory_cost: int = DEFAULT_MEMORY_COST
    ) -> None:
        self._hasher = PasswordHasher(time_cost=time_cost, memory_cost=memory_cost)
        self._lock = threading.Lock()
        self._dummy_hash: str | None = None

    @property
    def time_cost(self) -> int:
        return int(self._hasher.time_cost)

    @property
    def memory_cost(self) -> int:
        return int(self._hasher.memory_cost)

    def hash(self, password: str) -> str:
        return str(self._hasher.hash(password))

    def _dummy(self) -> str:
        """Verified against when the user does not exist, so both paths cost the same; made
        on first use, not at import."""
        with self._lock:
            if self._dummy_hash is None:
                self._dummy_hash = self.hash("mcpauth-timing-equaliser")
            return self._dummy_hash

    def verify_sync(self, password: str, password_hash: str | None) -> bool:
        try:
            matched = bool(self._hasher.verify(password_hash or self._dummy(), password))
        except (VerificationError, InvalidHashError):
            return False
        return matched and bool(password_hash)

    async def verify(self, password: str, password_hash: str | None) -> bool:
        """True if ``password`` matches; a missing user costs one verification all the same."""
        return await run_blocking(self.verify_sync, password, password_hash)


@functools.cache
def passwords_at(
    time_cost: int = DEFAULT_TIME_COST, memory_cost: int = DEFAULT_MEMORY_COST
) -> Passwords:
    """The :class:`Passwords` for one cost, made once per process (so its timing-equaliser
    hash is made once, too)."""
    return Passwords(time_cost=time_cost, memory_cost=memory_cost)


def hash_password(password: str, passwords: Passwords | None = None) -> str:
    """``password`` hashed by ``passwords`` (default: at the production cost)."""
    return (passwords or passwords_at()).hash(password)
