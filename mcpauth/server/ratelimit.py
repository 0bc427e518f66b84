"""Request rate limits in fixed windows, counted in the database so every replica shares them
(one upsert a request). Keys are the client address, and the client id where a request
names one in its Basic credentials. Over the limit: 429 with ``Retry-After``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread
from sqlalchemy import Engine, Table
from sqlalchemy.dialects import postgresql, sqlite
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpauth.errors import TooManyRequests
from mcpauth.server._authlib import basic_credentials
from mcpauth.server.http import error_response
from mcpauth.server.storage.models import RateCounter


@dataclass(frozen=True)
class Rate:
    limit: int  # requests per window; 0 disables
    window: int = 60  # seconds


def count(engine: Engine, key: str, now: int, window: int) -> tuple[int, int]:
    """Count one request for ``key``; returns the count in this window and the window start."""
    start = now - now % window
    table: Table = RateCounter.__table__  # type: ignore[attr-defined]
    insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    statement = insert(table).values(key=key, window_start=start, count=1)
    upsert = statement.on_conflict_do_update(
        index_elements=[table.c.key],
        set_={
            "count": (table.c.window_start == start).cast(table.c.count.type) * table.c.count + 1,
            "window_start": start,
        },
    ).returning(table.c.count)
    with engine.connect() as conn:
        conn = conn.execution_options(mcpauth_write=True)
        with conn.begin():
            value = conn.execute(upsert).scalar_one()
    return int(value), start


class RateLimitMiddleware:
    """Pure ASGI: checks ``rates`` (path suffix -> Rate) before the endpoint runs."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        engine: Engine,
        base_path: str,
        rates: dict[str, Rate],
        clock: Callable[[], float],
    ) -> None:
        self.app = app
        self.engine = engine
        self.rates = {f"{base_path}{suffix}": rate for suffix, rate in rates.items() if rate.limit}
        self.clock = clock

    def _rate(self, path: str) -> tuple[str, Rate] | None:
        if path in self.rates:
            return path, self.rates[path]
        if path.endswith("/login"):  # /interaction/<id>/login and /account/login
            for name, rate in self.rates.items():
                if name.endswith("/login"):
                    return name, rate
        return None

    def _check(self, keys: list[str], rate: Rate) -> int:
        now = int(self.clock())
        wait = 0
        for key in keys:
            seen, start = count(self.engine, key, now, rate.window)
            if seen > rate.limit:
                wait = max(wait, start + rate.window - now)
        return wait

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._rate(scope["path"]) if scope["type"] == "http" else None
        if found is None or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        name, rate = found
        client = scope.get("client")
        keys = [f"rate:{name}:ip:{client[0] if client else 'unknown'}"]
        authorization = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        basic = basic_credentials(authorization) if authorization[:6].lower() == "basic " else None
        if basic is not None:
            keys.append(f"rate:{name}:client:{basic[0][:200]}")
        wait = await anyio.to_thread.run_sync(self._check, keys, rate)
        if wait:
            response = error_response(TooManyRequests("Too many requests", retry_after=wait))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
