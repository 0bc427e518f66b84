"""Helpers for the trace tests: spans kept in memory for in-process tests, and a real OTLP/HTTP
receiver on 127.0.0.1 for processes the tests start. Both give spans as :class:`Span` values,
and both can list every string a span holds, for the search for credentials."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import mcpauth.tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@dataclass
class Span:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    service: str = ""
    texts: list[str] = field(default_factory=list)  # every string the span holds


class MemorySpans:
    """An SDK tracer provider that keeps finished spans, handed to mcpauth in place of the
    process's own (never installed globally, so other tests stay untraced)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[Span]:
        found = []
        for span in self.exporter.get_finished_spans():
            context = span.context
            assert context is not None
            attributes = dict(span.attributes or {})
            texts = [span.name, *_strings(attributes.values())]
            for event in span.events:
                texts += [event.name, *_strings((event.attributes or {}).values())]
            texts += _strings(span.resource.attributes.values())
            texts.append(span.status.description or "")
            found.append(
                Span(
                    name=span.name,
                    kind=span.kind.name,
                    trace_id=format(context.trace_id, "032x"),
                    span_id=format(context.span_id, "016x"),
                    parent_id=format(span.parent.span_id, "016x") if span.parent else "",
                    attributes=attributes,
                    texts=texts,
                )
            )
        return found

    def named(self, name: str) -> Span:
        matching = [span for span in self.spans() if span.name == name]
        assert len(matching) == 1, [span.name for span in self.spans()]
        return matching[0]


def _strings(values: Any) -> list[str]:
    found: list[str] = []
    for value in values:
        if isinstance(value, (list, tuple)):
            found += _strings(value)
        else:
            found.append(str(value))
    return found


@pytest.fixture
def memory_spans(monkeypatch: pytest.MonkeyPatch) -> MemorySpans:
    """Tracing on for what the test builds, into memory."""
    spans = MemorySpans()
    monkeypatch.setattr(mcpauth.tracing, "_provider", lambda: spans.provider)
    return spans


def no_credential_in(spans: list[Span], secrets: dict[str, str]) -> None:
    """Assert that no value of ``secrets`` (name → value) is in any string of any span."""
    assert spans
    for name, secret in secrets.items():
        assert secret, name
        leaks = [span.name for span in spans if any(secret in text for text in span.texts)]
        assert not leaks, f"the {name} is in the spans {leaks}"


class OTLPReceiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (``POST /v1/traces``, protobuf, gzip or not):
    keeps every export request, raw and decoded."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self._pb = trace_service_pb2
        self.raw: list[bytes] = []
        self._decoded: list[Any] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                status = 404
                if self.path == "/v1/traces":
                    request = receiver._pb.ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    with receiver._changed:
                        receiver.raw.append(body)
                        receiver._decoded.append(request)
                        receiver._changed.notify_all()
                    status = 200
                reply = receiver._pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def env(self, service: str) -> dict[str, str]:
        """The environment that sends a process's traces here, quickly."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "50",  # milliseconds
        }

    def spans(self) -> list[Span]:
        with self._changed:
            requests = list(self._decoded)
        return [span for request in requests for span in _decoded_spans(request)]

    def wait_for(self, condition: Callable[[list[Span]], bool], timeout: float = 20.0) -> None:
        """Until ``condition(spans)`` holds, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self.spans_locked()):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = [(s.service, s.name) for s in self.spans_locked()]
                    raise AssertionError(f"the spans never arrived; received: {names}")
                self._changed.wait(left)

    def spans_locked(self) -> list[Span]:
        return [span for request in self._decoded for span in _decoded_spans(request)]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.decode("latin-1")
    return getattr(value, kind) if kind else None


def _decoded_spans(request: Any) -> Iterator[Span]:
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes = {kv.key: _value(kv.value) for kv in span.attributes}
                texts = [span.name, span.status.message, *_strings(attributes.values())]
                texts += _strings(resource.values())
                for event in span.events:
                    texts.append(event.name)
                    texts += _strings(_value(kv.value) for kv in event.attributes)
                texts += [link.trace_state for link in span.links]
                texts.append(span.trace_state)
                yield Span(
                    name=span.name,
                    kind=span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    attributes=attributes,
                    service=str(resource.get("service.name", "")),
                    texts=texts,
                )
