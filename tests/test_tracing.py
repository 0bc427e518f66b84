"""When traces are on (mcpauth.tracing): the ``OTEL_*`` environment or a tracer provider the
process already has; off otherwise, and then nothing of OpenTelemetry is imported. Spans of
each part: tests/server/test_traces.py, tests/middleware/test_traces.py,
tests/proxy/test_traces.py; exported over OTLP by real processes: tests/e2e/test_traces.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import mcpauth.tracing
from mcpauth.errors import ConfigurationError

OTEL = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
CASES = [
    ({}, False),
    ({"OTEL_SERVICE_NAME": "mcpauth"}, False),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OTEL:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(("env", "on"), CASES, ids=[str(env) for env, _ in CASES])
def test_the_environment_turns_traces_on_only_when_it_names_an_exporter_or_an_endpoint(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], on: bool
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert mcpauth.tracing.configured() is on


def test_with_nothing_configured_there_is_no_tracer(clean_env: pytest.MonkeyPatch) -> None:
    assert mcpauth.tracing.tracer("mcpauth.server") is None


def test_traces_asked_for_without_the_sdk_are_a_configuration_error(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    clean_env.setitem(sys.modules, "opentelemetry.sdk._configuration", None)  # not installed
    with pytest.raises(ConfigurationError, match=r"mcpauth-kit\[otel\]"):
        mcpauth.tracing.tracer("mcpauth.server")


def test_off_the_middleware_and_the_proxy_import_nothing_of_opentelemetry() -> None:
    code = (
        "import sys\n"
        "from mcpauth.middleware import ProtectedResourceMiddleware\n"
        "from mcpauth.proxy.upstream import UpstreamProxy\n"
        "proxy = UpstreamProxy('http://127.0.0.1:1/mcp', path='/mcp')\n"
        "ProtectedResourceMiddleware(proxy, resource='https://mcp.example.com/mcp',\n"
        "    authorization_servers=['https://as.example.com'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert result.stdout.strip() == "[]"
