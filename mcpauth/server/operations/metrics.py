"""Optional Prometheus metrics (``pip install 'mcpauth-kit[metrics]'``, ``MCPAUTH_METRICS=true``):
requests by route and status with latencies, audit events by kind, and the pruner's work: rows
deleted and rows left per table (set by each pruner run; a scrape reads no database). A
registry per application, so several apps in one process (tests) never collide."""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpauth.errors import ConfigurationError


class Metrics:
    def __init__(self) -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:
            raise ConfigurationError(
                "metrics need prometheus-client: pip install 'mcpauth-kit[metrics]'"
            ) from exc
        self._prom = prom
        self.registry = prom.CollectorRegistry()
        self.requests = prom.Counter(
            "mcpauth_http_requests", "HTTP requests", ["route", "status"], registry=self.registry
        )
        self.latency = prom.Histogram(
            "mcpauth_http_request_seconds", "Request latency", ["route"], registry=self.registry
        )
        self.events = prom.Counter(
            "mcpauth_audit_events", "Security events", ["event"], registry=self.registry
        )
        self.pruned = prom.Counter(
            "mcpauth_pruned_rows",
            "Expired rows deleted by the pruner",
            ["table"],
            registry=self.registry,
        )

        self.rows = prom.Gauge(
            "mcpauth_table_rows",
            "Rows in each pruned table at the last pruner run (PostgreSQL: an estimate beyond "
            "100,000)",
            ["table"],
            registry=self.registry,
        )

    def count_pruned(self, counts: dict[str, int]) -> None:
        for table, rows in counts.items():
            self.pruned.labels(table=table).inc(rows)

    def set_table_rows(self, rows: dict[str, int]) -> None:
        for table, count in rows.items():
            self.rows.labels(table=table).set(count)

    def render(self) -> tuple[bytes, str]:
        return self._prom.generate_latest(self.registry), self._prom.CONTENT_TYPE_LATEST


class AuditCounter(logging.Handler):
    """Counts audit events into the metrics."""

    def __init__(self, metrics: Metrics) -> None:
        super().__init__()
        self.metrics = metrics

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "audit", None)
        if isinstance(fields, dict):
            self.metrics.events.labels(event=str(fields.get("event"))).inc()


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: dict[str, Any] = {"code": 500}

        async def record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", "unmatched")
            self.metrics.requests.labels(route=name, status=str(status["code"])).inc()
            self.metrics.latency.labels(route=name).observe(time.perf_counter() - started)


def endpoint(metrics: Metrics) -> Any:
    async def serve(request: Request) -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    return serve
