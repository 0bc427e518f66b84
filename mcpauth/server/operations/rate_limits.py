"""Request rate limits in fixed windows, shared by every replica through the database without
a database write on each request: a process counts in memory and merges its counts into the
shared table at most once a second (one transaction for all keys), reading back the totals
the other replicas wrote. A replica therefore learns of the others' traffic within about a
second, and the limit holds to within one second of traffic per replica.

Keys are the client address, counted for every request, and the client named in Basic
credentials, counted only once the request succeeded (the credentials were right): an outsider
naming a client cannot spend its budget. Over either limit: 429 with ``Retry-After``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpauth.errors import TooManyRequests
from mcpauth.oauth import parse_basic_authorization
from mcpauth.server.crypto import digest
from mcpauth.server.http_io import error_response
from mcpauth.server.operations.size_limits import address_in_key
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.defences import Slot, merge_rate_counts
from mcpauth.server.threads import run_blocking

SYNC_SECONDS = 1.0
MAX_PENDING_KEYS = 50_000


@dataclass(frozen=True)
class Rate:
    limit: int  # requests per window; 0 disables
    window: int = 60  # seconds


class SharedCounters:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._pending: dict[Slot, int] = {}  # counted here, not yet in the table
        self._known: dict[Slot, int] = {}  # the table's total at the last sync
        self._lock = threading.Lock()
        self.synced_at = float("-inf")

    def hit(self, slots: list[Slot]) -> int:
        """Count one request in each slot; the highest current estimate of their totals."""
        highest = 0
        with self._lock:
            pending, known = self._pending, self._known
            for slot in slots:
                count = pending[slot] = pending.get(slot, 0) + 1
                highest = max(highest, known.get(slot, 0) + count)
        return highest

    def current(self, slots: list[Slot]) -> int:
        """The highest current estimate of the slots' totals, counting nothing."""
        with self._lock:
            return max(
                (self._known.get(slot, 0) + self._pending.get(slot, 0) for slot in slots),
                default=0,
            )

    def due(self, now: float) -> bool:
        return now - self.synced_at >= SYNC_SECONDS or len(self._pending) > MAX_PENDING_KEYS

    def sync(self, now: float, interesting: Iterable[Slot]) -> None:
        """Merge pending counts into the table and refresh the totals of ``interesting``."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self.synced_at = now
        totals = merge_rate_counts(self._db, pending, interesting)
        with self._lock:
            self._known = {s: n for s, n in {**self._known, **totals}.items() if s[1] + 3600 > now}


def _route_path(scope: Scope) -> str:
    """The path the routes see: without the ``root_path`` an app mounted below a prefix gets
    (ASGI puts it in front of ``path``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class RateLimitMiddleware:
    """Pure ASGI: checks ``rates`` (path -> Rate) before the endpoint runs."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        db: Database,
        base_path: str,
        rates: dict[str, Rate],
        clock: Callable[[], float],
    ) -> None:
        self.app = app
        self.rates = {f"{base_path}{suffix}": rate for suffix, rate in rates.items() if rate.limit}
        self.login = next((r for name, r in self.rates.items() if name.endswith("/login")), None)
        self.clock = clock
        self.counters = SharedCounters(db)
        self._syncing = False

    def _rate(self, path: str) -> tuple[str, Rate] | None:
        if path in self.rates:
            return path, self.rates[path]
        if self.login is not None and path.endswith("/login"):  # interaction and account
            return "login", self.login
        return None

    def _keys(self, scope: Scope, name: str) -> tuple[str, str | None]:
        """The address's key and the key of the client the Basic credentials name (if any)."""
        client = scope.get("client")
        address = f"rate:{name}:ip:{address_in_key(client[0]) if client else 'unknown'}"
        raw = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        authorization = raw.decode("latin-1")
        basic = parse_basic_authorization(authorization)
        return address, (f"rate:{name}:client:{digest(basic[0])[:32]}" if basic else None)

    async def _sync(self, now: float, slots: list[Slot]) -> None:
        self._syncing = True
        try:
            await run_blocking(self.counters.sync, now, slots)
        finally:
            self._syncing = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._rate(_route_path(scope)) if scope["type"] == "http" else None
        if found is None or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        name, rate = found
        now = self.clock()
        start = int(now) - int(now) % rate.window
        address, named = self._keys(scope, name)
        client_slot = [(named, start)] if named else []
        if not self._syncing and self.counters.due(now):
            await self._sync(now, [(address, start), *client_slot])
        over = self.counters.hit([(address, start)]) > rate.limit
        if over or (client_slot and self.counters.current(client_slot) >= rate.limit):
            wait = max(1, start + rate.window - int(now))
            await error_response(TooManyRequests("Too many requests", retry_after=wait))(
                scope, receive, send
            )
            return
        if not client_slot:
            await self.app(scope, receive, send)
            return
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.app(scope, receive, watch)
        if status < 400:  # the named client authenticated: its budget counts this request
            self.counters.hit(client_slot)
