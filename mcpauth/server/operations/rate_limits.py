"""Request rate limits in fixed windows, shared by every replica through the database without
a database write on each request: a process counts in memory and merges its counts into the
shared table at most once a second (one transaction for all keys), reading back the totals
the other replicas wrote. A replica therefore learns of the others' traffic within about a
second, and the limit holds to within one second of traffic per replica.

Keys are the client address, counted for every request, and the client named in Basic
credentials, counted only once the request succeeded (the credentials were right): an outsider
naming a client cannot spend its budget. Over either limit: 429 with ``Retry-After``."""

from __future__ import annotations

import functools
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

    def hit(self, slot: Slot) -> int:
        """Count one request in ``slot``; the current estimate of its total."""
        with self._lock:
            count = self._pending[slot] = self._pending.get(slot, 0) + 1
            return self._known.get(slot, 0) + count

    def hit_and_current(self, slot: Slot, other: Slot | None) -> tuple[int, int]:
        """Count one request in ``slot``: the estimates of its total and of ``other``'s (0 for
        none), which is not counted."""
        with self._lock:
            pending, known = self._pending, self._known
            count = pending[slot] = pending.get(slot, 0) + 1
            if other is None:
                return known.get(slot, 0) + count, 0
            return known.get(slot, 0) + count, known.get(other, 0) + pending.get(other, 0)

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


_MEMO_MAX_LENGTH = 256  # keys of longer addresses and client ids are made afresh each time


def _address_key_of(name: str, address: str) -> str:
    return f"rate:{name}:ip:{address_in_key(address)}"


def _client_key_of(name: str, client_id: str) -> str:
    return f"rate:{name}:client:{digest(client_id)[:32]}"


# the same few keys request after request: each made once (a bounded memo of short inputs)
_address_key_memo = functools.lru_cache(maxsize=1024)(_address_key_of)
_client_key_memo = functools.lru_cache(maxsize=1024)(_client_key_of)


def _address_key(name: str, address: str | None) -> str:
    if address is None:
        return f"rate:{name}:ip:unknown"
    short = len(address) <= _MEMO_MAX_LENGTH
    return (_address_key_memo if short else _address_key_of)(name, address)


def _client_key(name: str, client_id: str) -> str:
    short = len(client_id) <= _MEMO_MAX_LENGTH
    return (_client_key_memo if short else _client_key_of)(name, client_id)


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
        address = _address_key(name, client[0] if client else None)
        for header, value in scope["headers"]:
            if header == b"authorization":
                basic = parse_basic_authorization(value.decode("latin-1"))
                return address, (_client_key(name, basic[0]) if basic else None)
        return address, None

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
        client_slot = (named, start) if named else None
        if not self._syncing and self.counters.due(now):
            await self._sync(now, [(address, start)] + ([client_slot] if client_slot else []))
        at_address, of_client = self.counters.hit_and_current((address, start), client_slot)
        if at_address > rate.limit or (client_slot and of_client >= rate.limit):
            wait = max(1, start + rate.window - int(now))
            await error_response(TooManyRequests("Too many requests", retry_after=wait))(
                scope, receive, send
            )
            return
        if client_slot is None:
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
