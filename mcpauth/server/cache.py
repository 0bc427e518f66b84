"""A small thread-safe, bounded cache whose entries live a few seconds: it keeps the database
off the hot path for rows that change rarely (clients, resources, lockouts). A change made
elsewhere (another replica, the admin CLI) is seen within ``ttl`` seconds; a change made in
this process invalidates at once."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    def __init__(self, ttl: float, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] > now:
                return entry[1]
        value = load()
        with self._lock:
            self._entries[key] = (now + self.ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def fresh(self, key: K) -> V | None:
        """The value of a fresh entry, without loading; None if there is none."""
        with self._lock:
            entry = self._entries.get(key)
            return entry[1] if entry is not None and entry[0] > time.monotonic() else None

    def holds(self, key: K) -> bool:
        """True if ``key`` has a fresh entry (a lookup would not load)."""
        with self._lock:
            entry = self._entries.get(key)
            return entry is not None and entry[0] > time.monotonic()

    def forget(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
