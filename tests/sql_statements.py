"""A pytest plugin that records, for each test, the SQL statements it sends to PostgreSQL and
how long it took: ``scripts/postgres_lane.py`` runs the server suite on PostgreSQL with it
(``-p tests.sql_statements``) and chooses the tests of the PostgreSQL lane from the records.

A statement is recorded as psycopg receives it, with its parameters' names and the length of
expanded ``IN`` lists folded away, so that one query is one statement whatever its values; the
test session's own ``CREATE DATABASE`` and ``DROP DATABASE`` are left out. Each worker writes
``statements-PID.json`` into ``$MCPAUTH_SQL_STATEMENTS_DIR``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import psycopg
import pytest

DIRECTORY_ENV = "MCPAUTH_SQL_STATEMENTS_DIR"
_SESSION_STATEMENTS = ("CREATE DATABASE", "DROP DATABASE")
_PARAMETER = re.compile(r"%\(\w+\)s(::\w+(\(\d+\))?)?")
_PARAMETER_LIST = re.compile(r"\bP(, P)+\b")
_ROW_LIST = re.compile(r"\(P\)(, \(P\))+")
_SPACE = re.compile(r"\s+")

_current: list[str] = []
_records: dict[str, dict[str, Any]] = {}


def statement_of(query: str | bytes) -> str:
    """One query text whatever its parameters: names, casts and list lengths folded into P."""
    text = query.decode() if isinstance(query, bytes) else query
    text = _SPACE.sub(" ", text).strip()
    text = _PARAMETER.sub("P", text.replace("%s", "P"))
    text = _PARAMETER_LIST.sub("P", text)
    return _ROW_LIST.sub("(P)", text)


def _recording(real: Callable[..., Any]) -> Callable[..., Any]:
    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if _current and isinstance(query, (str, bytes)):
            statement = statement_of(query)
            if not statement.startswith(_SESSION_STATEMENTS):
                _records[_current[-1]]["statements"].add(statement)
        return real(self, query, *args, **kwargs)

    return execute


def pytest_configure(config: pytest.Config) -> None:
    for name in ("execute", "executemany"):
        setattr(psycopg.Cursor, name, _recording(getattr(psycopg.Cursor, name)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    _records[item.nodeid] = {"statements": set(), "seconds": 0.0}
    _current.append(item.nodeid)
    started = time.monotonic()
    try:
        return (yield)
    finally:
        _current.pop()
        _records[item.nodeid]["seconds"] = time.monotonic() - started


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = os.environ.get(DIRECTORY_ENV)
    if not folder:
        return
    out = {
        test: {"statements": sorted(record["statements"]), "seconds": record["seconds"]}
        for test, record in _records.items()
    }
    (Path(folder) / f"statements-{os.getpid()}.json").write_text(json.dumps(out))
