"""The PostgreSQL lane of `make test` (tests/postgres_lane.txt, chosen by
scripts/postgres_lane.py): every test it names exists, so a renamed or removed test cannot drop
out of the lane unseen, and the statements the chooser counts are one per query whatever the
values bound to it."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from .conftest import POSTGRES_LANE, postgres_lane
from .sql_statements import statement_of

ROOT = Path(__file__).resolve().parent.parent


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test")
    }
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
    return names


def test_every_test_of_the_postgres_lane_exists() -> None:
    lane = postgres_lane()
    assert len(lane) >= 20, f"{POSTGRES_LANE} names too few tests: {len(lane)}"
    missing = []
    for test in sorted(lane):
        path, _, name = test.partition("::")
        assert path.startswith("tests/server/"), test
        if not (ROOT / path).is_file() or name not in _functions(ROOT / path):
            missing.append(test)
    assert not missing, f"{POSTGRES_LANE.name} names tests that do not exist: {missing}"


def test_a_statement_is_one_whatever_its_values() -> None:
    one = statement_of(
        "SELECT a FROM t WHERE t.id IN (%(id_1_1)s::VARCHAR, %(id_1_2)s::VARCHAR)\n"
        "  AND t.n < %(n_1)s::INTEGER"
    )
    other = statement_of("SELECT a FROM t WHERE t.id IN (%(id_1_1)s::VARCHAR) AND t.n < %(n_1)s")
    assert one == other == "SELECT a FROM t WHERE t.id IN (P) AND t.n < P"
    rows = statement_of("INSERT INTO t (a, b) VALUES (%s, %s), (%s, %s)")
    assert rows == statement_of("INSERT INTO t (a, b) VALUES (%s, %s)")
    assert statement_of("DELETE FROM t WHERE a = %(a)s") != statement_of(
        "DELETE FROM u WHERE a = %(a)s"
    )


def test_the_chooser_covers_every_statement_with_the_cheapest_functions() -> None:
    spec = importlib.util.spec_from_file_location(
        "postgres_lane", ROOT / "scripts/postgres_lane.py"
    )
    assert spec is not None
    assert spec.loader is not None
    chooser = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chooser)
    records = {
        "t.py::test_a[x]": ({"S1", "S2"}, 1.0),
        "t.py::test_a[y]": ({"S3"}, 1.0),
        "t.py::test_b": ({"S1", "S2", "S3"}, 9.0),
        "t.py::test_c": ({"S4"}, 0.1),
        "t.py::test_d": ({"S4"}, 5.0),
        "t.py::test_e": (set(), 0.1),
    }
    functions = chooser.by_function(records)
    assert functions["t.py::test_a"] == ({"S1", "S2", "S3"}, 2.0)
    assert chooser.cover(functions) == ["t.py::test_a", "t.py::test_c"]
