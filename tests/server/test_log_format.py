"""The text log format writes one event per line whatever the values hold: a value with a line
break, a carriage return, an ``=`` or a quote cannot forge a field or another audit event."""

from __future__ import annotations

import io
import logging
import shlex
import sys
from collections.abc import Iterator

import pytest

from mcpauth.server.operations.logs import TextFormatter, audit

FORGED = "mallory\ninfo [-] mcpauth.audit: login.success user_id=admin"


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("mcpauth.audit")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _fields(line: str) -> dict[str, str]:
    """key=value pairs after the message, unquoted like a shell would."""
    pairs = shlex.split(line.split(": ", 1)[1])[1:]
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize(
    "username",
    [
        FORGED,
        "mallory\rinfo [-] mcpauth.audit: login.success user_id=admin",
        "mallory user_id=admin",
        'mallory" user_id="admin',
        "mallory\u2028login.success",
        "mallory\x85login.success",
        "back\\slash",
    ],
)
def test_an_audit_value_never_spans_lines_nor_forges_a_field(
    text_log: io.StringIO, username: str
) -> None:
    audit("login.failed", username=username, address="203.0.113.7")
    output = text_log.getvalue()
    lines = output.splitlines()  # splits on \r, \x85 and \u2028 too
    assert len(lines) == 1, output
    assert lines[0].startswith("info [-] mcpauth.audit: login.failed ")
    assert "login.success" not in output.split("username=", 1)[0]
    fields = _fields(lines[0])
    assert set(fields) == {"username", "address"}
    assert fields["address"] == "203.0.113.7"


def test_plain_values_stay_bare_and_the_rest_are_json_quoted(text_log: io.StringIO) -> None:
    audit("token.issued", client_id="abc-123_x.y", scope="mcp:tools mcp:admin", n=3)
    line = text_log.getvalue().rstrip("\n")
    assert line.endswith(' client_id=abc-123_x.y scope="mcp:tools mcp:admin" n=3')


def test_the_message_and_a_traceback_stay_on_marked_lines() -> None:
    try:
        raise ValueError(FORGED)
    except ValueError:
        record = logging.LogRecord(
            "mcpauth", logging.ERROR, __file__, 1, "bad input %s", (FORGED,), None
        )
        record.exc_info = sys.exc_info()
    text = TextFormatter().format(record)
    first, *rest = text.split("\n")
    assert first.startswith("error [-] mcpauth: bad input mallory\\ninfo")
    assert rest
    assert all(line.startswith("  | ") for line in rest)
