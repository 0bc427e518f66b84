"""The registered resources, read from the database at most every two seconds (they change
through the admin commands, rarely); admin commands in this process refresh them at once."""

from __future__ import annotations

from dataclasses import dataclass

from mcpauth.caching import ExpiringCache
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.lookups import list_resources
from mcpauth.server.storage.models import Resource

CACHE_SECONDS = 2.0


@dataclass(frozen=True)
class Resources:
    by_uri: dict[str, Resource]
    default: Resource | None


class ResourceCatalog:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._cache: ExpiringCache[str, Resources] = ExpiringCache(CACHE_SECONDS, max_entries=1)

    def _load(self) -> Resources:
        with self._db.read() as session:
            rows = list_resources(session)
        return Resources({r.uri: r for r in rows}, next((r for r in rows if r.is_default), None))

    def current(self) -> Resources:
        return self._cache.get_or_load("all", self._load)

    def cached(self) -> Resources | None:
        """The resources from memory only; None if they would have to be read."""
        return self._cache.get("all")

    def refresh(self) -> None:
        self._cache.clear()
