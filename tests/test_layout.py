"""The shape of the package (docs/architecture.md): every module opens with a docstring that
says what it holds, no module shadows the standard library, no two server modules have
look-alike names, and the architecture document names every server module."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mcpauth"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)
SERVER = PACKAGE / "server"
# Pairs that people read as the same thing; a module name containing one word of a pair may
# not sit in the same tree as a module named after the other.
LOOK_ALIKES = [
    ("cache", "caching"),
    ("throttle", "ratelimit"),
    ("throttle", "rate_limits"),
    ("authorize", "authorization"),
    ("session", "sessions"),
    ("token", "tokens"),
    ("grant", "grants"),
    ("client", "clients"),
    ("registry", "directory"),
    ("lookups", "lookup"),
    ("issuance", "issued"),
]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_every_module_opens_with_a_docstring(path: Path) -> None:
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree)
    assert doc, f"{_rel(path)} has no docstring"
    assert len(doc.split()) >= 3, f"{_rel(path)} does not say what it holds"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_module_shadows_the_standard_library(path: Path) -> None:
    name = path.parent.name if path.name == "__init__.py" else path.stem
    assert name not in sys.stdlib_module_names, f"{_rel(path)} shadows the standard library"


def test_no_look_alike_module_names_in_the_server() -> None:
    names = {p.stem if p.name != "__init__.py" else p.parent.name for p in SERVER.rglob("*.py")}
    names -= {"__init__"}
    for first, second in LOOK_ALIKES:
        assert not (first in names and second in names), f"{first} and {second} look alike"


def test_the_architecture_document_names_every_server_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    listed = set(re.findall(r"\b([a-z_]+\.py)\b", text))
    missing = [
        _rel(p)
        for p in SERVER.rglob("*.py")
        if "migrations" not in p.parts
        and p.name != "__init__.py"
        and p.parent.name != "grants"  # listed as grants/ with its four grants
        and p.name not in listed
    ]
    assert not missing, f"docs/architecture.md does not name {missing}"
