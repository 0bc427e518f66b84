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


# Which server packages each one may import (besides itself and the shared top-level modules
# config, context, crypto, threads, http_io); docs/architecture.md explains the direction.
SHARED = {"config", "context", "crypto", "threads", "http_io"}
ALLOWED = {
    "storage": set(),
    "operations": {"storage"},
    "identity": {"storage", "operations"},
    "clients": {"storage", "operations", "identity"},
    "authorization": {"storage", "operations", "identity", "clients", "browser"},
    "browser": {"storage", "operations", "identity", "clients", "authorization"},
    "tokens": {"storage", "operations", "identity", "clients", "authorization"},
}


def _server_imports(path: Path) -> set[str]:
    """The first names below ``mcpauth.server`` that a module imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["mcpauth", "server"]:
                if len(parts) > 2:
                    found.add(parts[2])
                else:
                    found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_server_packages_depend_one_way(package: str) -> None:
    allowed = ALLOWED[package] | SHARED | {package}
    wrong = {
        _rel(path): sorted(_server_imports(path) - allowed)
        for path in (SERVER / package).rglob("*.py")
        if "migrations" not in path.parts and _server_imports(path) - allowed
    }
    assert not wrong, f"{package} imports what it may not: {wrong}"


def test_the_shared_modules_import_no_domain_package() -> None:
    shared = {"config", "crypto", "threads", "http_io"}
    wrong = {
        name: sorted(_server_imports(SERVER / f"{name}.py") & set(ALLOWED) - {"operations"})
        for name in shared
    }
    assert not any(wrong.values()), wrong
