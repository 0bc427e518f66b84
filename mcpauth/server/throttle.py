"""Failure throttling shared through the database, so every replica sees the same counts
(attacks.md rows 19 and 20). A key that reaches its limit inside the window is locked, and
each further failure while counting doubles the lock, up to an hour."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from mcpauth.server.storage.models import Throttle

MAX_LOCK_SECONDS = 3600


@dataclass(frozen=True)
class Limit:
    failures: int  # failures allowed inside the window before the key locks
    window: int  # seconds
    lockout: int  # seconds of the first lock


def retry_after(session: Session, key: str, now: int) -> int:
    """Seconds until ``key`` may try again (0: not locked)."""
    row = session.get(Throttle, key)
    if row is None or row.locked_until <= now:
        return 0
    return row.locked_until - now


def record_failure(session: Session, key: str, now: int, limit: Limit) -> int:
    """Count a failure; returns the lock in seconds it caused (0 if none)."""
    row = session.get(Throttle, key)
    if row is None or now - row.window_start >= limit.window:
        row = row or Throttle(key=key, window_start=now)
        row.window_start = now
        row.failures = 0
    row.failures += 1
    lock = 0
    if row.failures >= limit.failures:
        excess = row.failures - limit.failures
        lock = min(limit.lockout * (2 ** min(excess, 12)), MAX_LOCK_SECONDS)
        row.locked_until = now + lock
    session.add(row)
    return lock


def clear(session: Session, key: str) -> None:
    row = session.get(Throttle, key)
    if row is not None:
        session.delete(row)
