"""Failure throttling shared through the database, so every replica sees the same counts
(docs/security.md T19, T20). A key that reaches its limit inside the window is locked, and
each further failure while counting doubles the lock, up to an hour."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from mcpauth.caching import ExpiringCache
from mcpauth.server.storage import defences
from mcpauth.server.storage.database import Database, Session

MAX_LOCK_SECONDS = 3600
LOCK_CACHE_SECONDS = 1.0


@dataclass(frozen=True)
class Limit:
    failures: int  # failures allowed inside the window before the key locks
    window: int  # seconds
    lockout: int  # seconds of the first lock


def retry_after(session: Session, key: str, now: int) -> int:
    """Seconds until ``key`` may try again (0: not locked)."""
    return max(0, defences.locked_until(session, key) - now)


def record_failure(session: Session, key: str, now: int, limit: Limit) -> int:
    """Count a failure; returns the lock in seconds it caused (0 if none)."""
    return _lock_if_spent(
        session, key, now, limit, defences.count_failure(session, key, now, limit.window)
    )


def _lock_if_spent(session: Session, key: str, now: int, limit: Limit, failures: int) -> int:
    """Lock ``key`` once its ``failures`` reach the limit, doubling with each one past it;
    the lock in seconds (0 if none)."""
    if failures < limit.failures:
        return 0
    excess = failures - limit.failures
    lock = int(min(limit.lockout * (1 << min(excess, 12)), MAX_LOCK_SECONDS))
    defences.lock(session, key, now + lock)
    return lock


def take_attempt(session: Session, key: str, now: int, limit: Limit) -> int | None:
    """Count an attempt at a guessable secret *before* it is checked, in the transaction that
    checks it: the attempt's number in the window, or None (nothing to check) when ``key`` is
    locked or the attempt is past the limit. Counting first keeps concurrent guesses within
    the limit: the count is one atomic statement, where a read of the lock followed by a
    failure counted later lets every request that read "unlocked" be checked. The caller
    clears the key on success (:func:`clear`) or calls :func:`failed_attempt`."""
    if retry_after(session, key, now):
        return None
    failures = defences.count_failure(session, key, now, limit.window)
    if failures > limit.failures:
        _lock_if_spent(session, key, now, limit, failures)
        return None
    return failures


def failed_attempt(session: Session, key: str, now: int, limit: Limit, attempt: int) -> None:
    """The attempt :func:`take_attempt` numbered ``attempt`` failed: the key locks when it
    was the last one allowed."""
    _lock_if_spent(session, key, now, limit, attempt)


def clear(session: Session, key: str) -> None:
    defences.clear_failures(session, key)


class Lockouts:
    """Lock state per key from the database, cached a second: the common request (no
    failures) reads nothing; a lock set by another replica is seen within a second."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._cache: ExpiringCache[str, int] = ExpiringCache(LOCK_CACHE_SECONDS)

    def _locked_until(self, key: str) -> int:
        with self._db.read() as session:
            return defences.locked_until(session, key)

    def retry_after(self, keys: tuple[str, ...], now: int) -> int:
        """Seconds until every key may try again (0: none is locked)."""
        until = max(self._cache.get_or_load(key, partial(self._locked_until, key)) for key in keys)
        return max(0, until - now)

    def cached_retry_after(self, keys: tuple[str, ...], now: int) -> int | None:
        """:meth:`retry_after` from memory only; None if a key's state would have to be read."""
        latest = 0
        for key in keys:  # a plain loop: every token request answered from memory asks
            until = self._cache.get(key)
            if until is None:
                return None
            latest = max(latest, until)
        return max(0, latest - now)

    def forget(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            self._cache.forget(key)
