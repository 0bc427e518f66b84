"""Choose the server tests that `make test` runs on PostgreSQL as well as SQLite.

Runs the whole server suite on PostgreSQL once (``MCPAUTH_TEST_DATABASE=postgresql``) with the
``tests.sql_statements`` plugin, which records every SQL statement each test sends, then picks,
greedily by statements gained per second, tests until every statement the suite sends is sent
by one of them, and writes their ids to ``tests/postgres_lane.txt``. The storage modules and
the concurrency tests (``@pytest.mark.every_engine``, see tests/conftest.py) run on both
engines whatever this file says; `make test-postgres` runs every server test on PostgreSQL.

    .venv/bin/python scripts/postgres_lane.py        (or `make postgres-lane`)

Run it after adding SQL to mcpauth (a new query, a changed table): the printed summary says how
many statements there are and what the chosen tests cost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANE = ROOT / "tests" / "postgres_lane.txt"
HEADER = """\
# The server tests that run on PostgreSQL as well as SQLite in `make test` (beside the storage
# modules and the tests marked every_engine, tests/conftest.py): between them they send every
# SQL statement the whole server suite sends to PostgreSQL. Written by scripts/postgres_lane.py
# (`make postgres-lane`): {statements} statements, {chosen} of {tests} test functions, each
# with all its cases.
"""


Records = dict[str, tuple[set[str], float]]  # test: (the statements it sends, its seconds)


def record(folder: Path) -> Records:
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "tests.sql_statements", "-p",
        "no:cacheprovider", "-n", os.environ.get("PYTEST_WORKERS", "3"), "tests/server",
    ]  # fmt: skip
    env = os.environ | {
        "MCPAUTH_TEST_DATABASE": "postgresql",
        "MCPAUTH_SQL_STATEMENTS_DIR": str(folder),
    }
    subprocess.run(command, cwd=ROOT, env=env, check=True)  # noqa: S603 (our own argv)
    records: Records = {}
    for path in folder.glob("statements-*.json"):
        for test, found in json.loads(path.read_text()).items():
            records[test] = (set(found["statements"]), float(found["seconds"]))
    return records


def by_function(records: Records) -> Records:
    """The records of each test function, its parametrized cases together (a function is in
    the lane with all its cases)."""
    functions: Records = {}
    for test, (statements, seconds) in records.items():
        before, spent = functions.get(test.split("[")[0], (set(), 0.0))
        functions[test.split("[")[0]] = (before | statements, spent + seconds)
    return functions


def cover(functions: Records) -> list[str]:
    """Functions until every statement is sent by one, each the most statements per second."""
    left = set().union(*(statements for statements, _ in functions.values()))
    chosen: list[str] = []
    while left:
        best = max(
            sorted(functions),
            key=lambda test: len(functions[test][0] & left) / (functions[test][1] + 0.3),
        )
        chosen.append(best)
        left -= functions[best][0]
    return sorted(chosen)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        functions = by_function(record(Path(folder)))
    chosen = cover(functions)
    statements = set().union(*(statements for statements, _ in functions.values()))
    seconds = sum(functions[test][1] for test in chosen)
    total = sum(spent for _, spent in functions.values())
    header = HEADER.format(statements=len(statements), chosen=len(chosen), tests=len(functions))
    LANE.write_text(header + "".join(f"{test}\n" for test in chosen))
    print(
        f"{len(statements)} statements; {len(chosen)} of {len(functions)} test functions "
        f"({seconds:.0f} of {total:.0f} s) written to {LANE.relative_to(ROOT)}"
    )


if __name__ == "__main__":
    main()
