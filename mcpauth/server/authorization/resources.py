"""The registered resources, read from the database at most every two seconds (they change
through the admin commands, rarely); admin commands in this process refresh them at once."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mcpauth.caching import ExpiringCache
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.lookups import list_resources
from mcpauth.server.storage.models import Resource
from mcpauth.uris import without_trailing_slash

CACHE_SECONDS = 2.0


@dataclass(frozen=True)
class Resources:
    by_uri: dict[str, Resource]
    default: Resource | None
    # each URI without its trailing slash → the one resource so named (None: more than one)
    _loose: dict[str, Resource | None] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, rows: Iterable[Resource]) -> Resources:
        rows = list(rows)
        loose: dict[str, Resource | None] = {}
        for row in rows:
            key = without_trailing_slash(row.uri)
            loose[key] = None if key in loose else row
        default = next((r for r in rows if r.is_default), None)
        return cls({r.uri: r for r in rows}, default, loose)

    def find(self, canonical: str) -> Resource | None:
        """The resource a canonical URI names: the one registered under it, else the only one
        that differs from it in a trailing slash (never a guess between two)."""
        exact = self.by_uri.get(canonical)
        if exact is not None:
            return exact
        return self._loose.get(without_trailing_slash(canonical))


class ResourceCatalog:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._cache: ExpiringCache[str, Resources] = ExpiringCache(CACHE_SECONDS, max_entries=1)

    def _load(self) -> Resources:
        with self._db.read() as session:
            rows = list_resources(session)
        return Resources.of(rows)

    def current(self) -> Resources:
        return self._cache.get_or_load("all", self._load)

    def cached(self) -> Resources | None:
        """The resources from memory only; None if they would have to be read."""
        return self._cache.get("all")

    def refresh(self) -> None:
        self._cache.clear()
