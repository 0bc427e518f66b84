"""OpenTelemetry traces, off unless configured (``pip install 'mcpauth-kit[otel]'``).

Each part asks :func:`tracer` once, when it is built (``create_app``, the middleware, the
proxy); ``None`` means tracing is off and the part adds no tracing code to its requests and
never imports OpenTelemetry. Tracing is on when:

- the process already has a tracer provider (the application set one up, or runs under
  ``opentelemetry-instrument``): spans go to it; or
- the environment asks for traces: ``OTEL_TRACES_EXPORTER`` set to anything but ``none``, or
  an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).
  The SDK's own configurator then reads every ``OTEL_*`` variable (exporters, endpoint,
  headers, sampler, resource, batch sizes) and installs the global provider, once per
  process. Two defaults differ from the Python SDK's: the exporter is ``otlp`` when only an
  endpoint is given, and OTLP speaks ``http/protobuf`` (the OpenTelemetry specification's
  default, the exporter the extra installs) unless ``OTEL_EXPORTER_OTLP_PROTOCOL`` or
  ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` says otherwise.

``OTEL_SDK_DISABLED=true`` turns it off. What the spans carry, and what they never carry
(tokens, codes, secrets, passwords, proofs, cookies, query strings): :mod:`.asgi` and
``docs/deploy.md``.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING

from mcpauth.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider

__all__ = ["configured", "tracer"]

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_configuring = threading.Lock()


def configured() -> bool:
    """Whether the environment asks for traces (see the module docstring)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return any(os.environ.get(name, "").strip() for name in _ENDPOINTS)


def tracer(name: str) -> Tracer | None:
    """The tracer of instrumentation scope ``name`` (``mcpauth.server``, ``mcpauth.middleware``,
    ``mcpauth.proxy``), or ``None`` when tracing is off.

    Raises:
        ConfigurationError: the environment asks for traces but the OpenTelemetry SDK is not
            installed, or names an exporter that is not.
    """
    provider = _provider()
    if provider is None:
        return None
    return provider.get_tracer(name, _version())


def _provider() -> TracerProvider | None:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    installed = _installed()
    if installed is not None or not configured():
        return installed
    with _configuring:
        return _installed() or _configure()


def _installed() -> TracerProvider | None:
    """The process's tracer provider, if anyone set one (looked up without importing
    OpenTelemetry: a process that never imported it has none)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider: TracerProvider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider


def _configure() -> TracerProvider:
    """Install the SDK's provider as the environment describes it (the SDK reads it)."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk._configuration import _OTelSDKConfigurator
    except ImportError as exc:
        raise ConfigurationError(
            "traces need the OpenTelemetry SDK: pip install 'mcpauth-kit[otel]'"
        ) from exc
    if not os.environ.get("OTEL_TRACES_EXPORTER", "").strip():
        os.environ["OTEL_TRACES_EXPORTER"] = "otlp"  # only an endpoint was given
    if not any(os.environ.get(name, "").strip() for name in _PROTOCOLS):
        os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    try:
        _OTelSDKConfigurator().configure()  # type: ignore[no-untyped-call]
    except (RuntimeError, ValueError) as exc:  # an exporter, sampler or protocol it lacks
        raise ConfigurationError(f"OpenTelemetry configuration: {exc}") from exc
    return trace.get_tracer_provider()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcpauth-kit")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"
