"""Experiment for bench/token/run.py --serialize-writes (not how mcpauth ships): `mcpauth serve`
with every write transaction taken under one in-process lock, so that on SQLite writers queue on
a lock that is handed over at once instead of sleeping in SQLite's busy handler."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlmodel import Session

from mcpauth.cli import main
from mcpauth.server.storage import database

_write = database.Database.write
_lock = threading.Lock()


@contextmanager
def _serialized_write(self: database.Database) -> Iterator[Session]:
    with _lock, _write(self) as session:
        yield session


database.Database.write = _serialized_write  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
