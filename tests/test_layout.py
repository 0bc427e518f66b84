"""The shape of the package (docs/architecture.md): every module opens with a docstring that
says what it holds, no module shadows the standard library, no two server modules have
look-alike names, the architecture document names every server module, no module imports
itself through others (no import cycles), and the server's domains depend one way."""

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


def test_the_architecture_document_names_every_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    listed = set(re.findall(r"\b([a-z_]+\.py)\b", text))
    missing = [
        _rel(p)
        for p in PACKAGE.rglob("*.py")
        if "migrations" not in p.parts
        and p.name not in ("__init__.py", "__main__.py")
        and p.parent.name != "grants"  # listed as grants/ with its grants
        and p.name not in listed
    ]
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_the_architecture_document_names_nothing_that_is_gone() -> None:
    """Every module, path and class the document names exists in the tree (a renamed or
    removed one makes the document wrong)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    files = {p.name for p in ROOT.glob("**/*.py") if ".venv" not in p.parts}
    stale = sorted(
        name for name in set(re.findall(r"\b([a-z_]+\.py)\b", text)) if name not in files
    )
    paths = re.findall(r"`((?:mcpauth|tests|docs|bench|examples|scripts|docker)/[\w./-]+)`", text)
    stale += sorted(path for path in set(paths) if not (ROOT / path.rstrip("/")).exists())
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    for name in set(re.findall(r"`([A-Z][A-Za-z0-9]+)(?:[(`.])", text)):
        if not re.search(rf"\b(class|def)\s+{name}\b|\b{name}\s*[:=]", source):
            stale.append(name)
    assert stale == [], f"docs/architecture.md names what the tree no longer has: {stale}"


# Which server packages each one may import (besides itself and the shared top-level modules
# config, crypto, threads, http_io, outbound); docs/architecture.md explains the direction.
# There is no exception: the shared modules import no domain package, and the object every
# request reads is built by the composition root (context.py), which no domain imports.
SHARED = {"config", "crypto", "threads", "http_io", "outbound"}
ALLOWED = {
    "storage": set(),
    "operations": {"storage"},
    "identity": {"storage", "operations"},
    "clients": {"storage", "operations", "identity"},
    "browser": {"storage", "operations", "identity", "clients"},
    "authorization": {"storage", "operations", "identity", "clients", "browser"},
    "tokens": {"storage", "operations", "identity", "clients", "authorization"},
}
# Who may import the composition root: the app it assembles, the admin API and discovery
# (which read the whole of it) and the command line.
COMPOSITION_ROOT = "mcpauth.server.context"
ASSEMBLERS = {"mcpauth.server.app", "mcpauth.server.admin", "mcpauth.server.discovery"}


def _imports(path: Path, name: str | None = None) -> set[str]:
    """The dotted names the module at ``path`` (named ``name``) imports, in any function and
    under ``if TYPE_CHECKING:`` too (``from a import b`` is ``a.b``, a module or a name in
    ``a``)."""
    name = name or _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return {
        imported
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for imported in _imported_names(node, package)
    }


def _below_server(imports: set[str]) -> set[str]:
    """The first names below ``mcpauth.server`` among ``imports``."""
    return {
        parts[2]
        for imported in imports
        if (parts := imported.split("."))[:2] == ["mcpauth", "server"] and len(parts) > 2
    }


def _server_imports(path: Path) -> set[str]:
    """The first names below ``mcpauth.server`` that a module imports."""
    return _below_server(_imports(path))


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
    wrong = {name: sorted(_server_imports(SERVER / f"{name}.py") & set(ALLOWED)) for name in SHARED}
    assert not any(wrong.values()), wrong


def _names_composition_root(imports: set[str]) -> bool:
    return any(
        imported == COMPOSITION_ROOT or imported.startswith(COMPOSITION_ROOT + ".")
        for imported in imports
    )


def test_only_the_assemblers_import_the_composition_root() -> None:
    """A domain package names the services it reads in its own ``services.py`` and never
    imports ``context.py``: that module imports every domain, so importing it back would make
    it a hub through which each domain reaches every other."""
    importers = {_module_name(p) for p in MODULES if _names_composition_root(_imports(p))}
    wrong = sorted(
        name
        for name in importers - ASSEMBLERS
        if not name.startswith("mcpauth.cli.") and name != COMPOSITION_ROOT
    )
    assert not wrong, f"only {sorted(ASSEMBLERS)} and the command line import context: {wrong}"
    assert importers >= ASSEMBLERS  # the rule names the modules that do


def test_the_import_rules_see_what_they_forbid(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "import mcpauth.server.browser.pages\n"
        "from mcpauth.server import context\n"
        "if TYPE_CHECKING:\n"
        "    from ..admin import Admin\n"
        "def f():\n"
        "    from mcpauth.server.context import ServerContext\n"
    )
    imports = _imports(sample, "mcpauth.server.tokens.sample")
    assert _below_server(imports) == {"browser", "context", "admin"}
    assert _names_composition_root(imports)
    assert _names_composition_root({"mcpauth.server.context.ServerContext"})
    assert not _names_composition_root({"mcpauth.server.contexts", "mcpauth.server.app"})


# The methods that run SQL or change rows through a unit of work.
_SQL_METHODS = {"execute", "exec", "scalar", "scalars", "merge", "flush", "begin_nested"}
_UNIT_NAMES = {"session", "conn", "connection"}


def _sql_outside_storage(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            modules += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [
                f"line {node.lineno}: imports {m}"
                for m in modules
                if m.split(".")[0] in ("sqlalchemy", "sqlmodel")
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in _UNIT_NAMES
            and (node.func.attr in _SQL_METHODS or node.func.attr in {"get", "add", "delete"})
        ):
            found.append(f"line {node.lineno}: {node.func.value.id}.{node.func.attr}()")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "connection"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "session"
        ):
            found.append(f"line {node.lineno}: session.connection()")
    return found


def test_all_sql_lives_in_the_storage_package() -> None:
    """Every query and row change is a function of ``mcpauth/server/storage`` (its
    repositories); the domain packages hold units of work and call those functions, and
    only storage imports SQLAlchemy or SQLModel (the types they name are re-exported by
    ``storage/database.py``)."""
    wrong = {
        _rel(path): hits
        for path in PACKAGE.rglob("*.py")
        if "storage" not in path.parts
        and "migrations" not in path.parts
        and (hits := _sql_outside_storage(path))
    }
    assert not wrong, f"SQL outside mcpauth/server/storage: {wrong}"


def test_the_sql_rule_sees_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from sqlmodel import select\n"
        "def f(session, conn):\n"
        "    session.get(A, 1)\n"
        "    session.add(a)\n"
        "    conn.execute(q)\n"
        "    session.connection()\n"
        "    cache.get(1)\n"
    )
    assert len(_sql_outside_storage(sample)) == 5


# Which parts of mcpauth each part may import besides itself and the shared top-level modules
# (errors, oauth, metadata, uris, jwt, dpop, caching, asgi, key_sets, and the tracing
# package); docs/architecture.md, "Dependency direction". The proxy builds on the middleware;
# nothing builds on the proxy.
SHARED_MODULES = {
    "errors", "oauth", "metadata", "uris", "jwt", "dpop", "caching", "asgi", "key_sets",
    "tracing",
}  # fmt: skip
PARTS = {
    "server": set(),
    "middleware": set(),
    "client": set(),
    "proxy": {"middleware"},
}


def _mcpauth_imports(path: Path) -> set[str]:
    """The first names below ``mcpauth`` that a module imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] != "mcpauth":
                continue
            if len(parts) > 1:
                found.add(parts[1])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(
                alias.name.split(".")[1]
                for alias in node.names
                if alias.name.startswith("mcpauth.")
            )
    return found


@pytest.mark.parametrize("part", sorted(PARTS))
def test_the_parts_depend_one_way(part: str) -> None:
    allowed = PARTS[part] | SHARED_MODULES | {part}
    wrong = {
        _rel(path): sorted(_mcpauth_imports(path) - allowed)
        for path in (PACKAGE / part).rglob("*.py")
        if "migrations" not in path.parts and _mcpauth_imports(path) - allowed
    }
    assert not wrong, f"{part} imports what it may not: {wrong}"


@pytest.mark.parametrize("name", sorted(SHARED_MODULES))
def test_the_shared_modules_import_no_part(name: str) -> None:
    module = PACKAGE / f"{name}.py"
    paths = [module] if module.exists() else sorted((PACKAGE / name).rglob("*.py"))
    assert paths
    for path in paths:
        assert not _mcpauth_imports(path) & set(PARTS), _rel(path)


# Import cycles. The graph has an edge for every import a module runs: at module level or
# inside a function (a lazy import still ties the two modules together, it only defers the
# cost). Imports under ``if TYPE_CHECKING:`` are left out: they never run, so they cannot
# leave a module half-initialised, and they exist so that a function can name the type of a
# value it is handed without depending on the code that makes it (``outbound.py`` names
# ``config.Settings`` that way, and config imports outbound).


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names ``node`` imports (``from a import b`` is ``a.b``, which may be a
    module or a name in ``a``), relative imports resolved against ``package``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parent = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parent, *([node.module] if node.module else [])])
    return [f"{base}.{alias.name}" for alias in node.names]


def _runtime_imports(source: str, name: str, is_package: bool) -> list[str]:
    """The dotted names a module imports when it runs, in any function, but not under
    ``if TYPE_CHECKING:``."""
    package = name if is_package else name.rpartition(".")[0]
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.extend(_imported_names(node, package))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def _import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    paths = {_module_name(p): p for p in MODULES}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        for imported in _runtime_imports(path.read_text(), name, path.name == "__init__.py"):
            while imported and imported not in paths:  # a name in a module: the module
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the path that closes it (``[a, b, a]``), or ``None``."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for target in sorted(graph.get(node, ())):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done and (cycle := visit(target)):
                return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done and (cycle := visit(start)):
            return cycle
    return None


def test_no_module_imports_itself_through_others() -> None:
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_rule_sees_what_it_forbids() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "import mcpauth.errors\n"
        "if TYPE_CHECKING:\n"
        "    from mcpauth.server.config import Settings\n"
        "def f():\n"
        "    from mcpauth.server.app import create_app\n"
    )
    imports = _runtime_imports(source, "mcpauth.server.outbound", is_package=False)
    assert imports == [
        "typing.TYPE_CHECKING",
        "mcpauth.server.sibling",
        "mcpauth.errors",
        "mcpauth.server.app.create_app",
    ]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_server_domains_import_each_other_without_cycles() -> None:
    """Module by module there is no cycle (above); neither is there one between the domain
    packages, whose modules could otherwise form a loop through each other's packages."""
    graph = {
        package: {
            name
            for path in (SERVER / package).rglob("*.py")
            for name in _server_imports(path)
            if name in ALLOWED and name != package
        }
        for package in ALLOWED
    }
    cycle = _find_cycle(graph)
    assert cycle is None, "the server's domains import each other: " + " -> ".join(cycle or [])
