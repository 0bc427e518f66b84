"""Rules checked over the source itself (docs/security.md T18): secrets are never compared with
``==``/``!=``, and only ``mcpauth.oauth.same_secret`` calls ``compare_digest`` (on bytes: on
two ``str`` it raises for anything but ASCII); randomness comes from ``secrets`` only.

Module length is not a rule: a module holds one concept, and one that grows long is a place to
ask whether two concepts share a file, never a reason to cut a cohesive module in two."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mcpauth"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)
SECRET_WORDS = ("secret", "password", "csrf", "verifier", "digest", "assertion")
SECRET_NAMES = {"token", "code", "code_value", "value"}


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Call):
        return [*_names(node.func), *(n for arg in node.args for n in _names(arg))]
    return []


def _is_sql_column(node: ast.AST) -> bool:
    """``col(Model.x)`` or ``table.c.x``: a SQL expression, compared by the database."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "col"
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "c"
    )


def _secretish(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return False
    return any(
        name.lower() in SECRET_NAMES or any(word in name.lower() for word in SECRET_WORDS)
        for name in _names(node)
    )


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_t18_secrets_are_never_compared_with_equality(path: Path) -> None:
    tree = ast.parse(path.read_text())
    offenders = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
        ):
            operands = [node.left, *node.comparators]
            if any(_is_sql_column(o) for o in operands):
                continue  # a database lookup by digest, not a comparison in Python
            if sum(_secretish(o) for o in operands) >= 2:
                offenders.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_t18_randomness_comes_from_secrets_only(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(alias.name != "random" for alias in node.names), path
        if isinstance(node, ast.ImportFrom):
            assert node.module != "random", path


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_t18_only_same_secret_calls_compare_digest(path: Path) -> None:
    if path == PACKAGE / "oauth.py":
        return
    tree = ast.parse(path.read_text())
    calls = [
        f"{path.name}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute | ast.Name)
        and (node.attr if isinstance(node, ast.Attribute) else node.id) == "compare_digest"
    ]
    assert calls == [], "compare secrets with mcpauth.oauth.same_secret"


# One home per rule: scope strings are split only by mcpauth.oauth.parse_scope, and loopback is
# decided only by mcpauth.uris.is_loopback_host (docs/architecture.md, "One stack per concern").
_SCOPE_NAMES = ("scope",)
_LOOPBACK_LITERALS = {"localhost", "127.0.0.1", "::1", "[::1]"}


def _all_names(node: ast.AST) -> list[str]:
    """Every name and attribute in an expression (``(scope or "")`` names ``scope``)."""
    return [n for sub in ast.walk(node) for n in _names(sub) if not isinstance(sub, ast.Call)]


def _scope_splits(tree: ast.AST) -> list[int]:
    """Lines that call ``.split(...)`` on something named like a scope."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("split", "rsplit")
        and any(
            word in name.lower() for name in _all_names(node.func.value) for word in _SCOPE_NAMES
        )
    ]


def _loopback_lists(tree: ast.AST) -> list[int]:
    """Lines holding a collection of two or more loopback host literals."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Tuple | ast.List | ast.Set)
        and sum(
            isinstance(item, ast.Constant) and item.value in _LOOPBACK_LITERALS
            for item in node.elts
        )
        >= 2
    ]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_oauth_module_splits_scope_strings(path: Path) -> None:
    if path == PACKAGE / "oauth.py":
        return
    found = _scope_splits(ast.parse(path.read_text()))
    assert not found, f"{path.name} splits a scope string itself (lines {found}): use parse_scope"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_uris_module_says_what_loopback_is(path: Path) -> None:
    if path == PACKAGE / "uris.py":
        return
    found = _loopback_lists(ast.parse(path.read_text()))
    assert not found, (
        f"{path.name} lists loopback hosts itself (lines {found}): use is_loopback_host"
    )


def test_the_one_home_rules_see_what_they_forbid() -> None:
    sample = ast.parse(
        "a = client.scope.split()\n"
        "b = (scope or '').split(' ')\n"
        "c = host in ('localhost', '127.0.0.1')\n"
        "d = {'::1', 'localhost'}\n"
        "e = name.split()\n"
    )
    assert sorted(_scope_splits(sample)) == [1, 2]
    assert sorted(_loopback_lists(sample)) == [3, 4]


def _wall_time_reads(tree: ast.AST) -> list[int]:
    """Lines that call ``time.time()`` directly."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "time"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    ]


@pytest.mark.parametrize(
    "path",
    sorted(p for part in ("middleware", "proxy") for p in (PACKAGE / part).rglob("*.py")),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_the_middleware_and_proxy_read_the_time_through_their_clock(path: Path) -> None:
    found = _wall_time_reads(ast.parse(path.read_text()))
    assert not found, f"{path.name} reads time.time() (lines {found}): use the injected clock"


# Where each library with a rival in the environment may be imported (docs/architecture.md,
# "One stack per concern"): every outbound call of mcpauth goes through httpx2; httpx is
# imported only so that ``OAuth`` can also authenticate a caller's own httpx client. PyJWT is
# the JOSE library (tests/test_jwt_signing.py keeps it in jwt.py and dpop.py): joserfc and
# Authlib's JOSE and OpenID modules have no home (Authlib still uses joserfc inside).
_LIBRARY_HOMES = {
    "httpx": {"client/auth.py"},
    "httpcore": set(),  # httpx's transport: httpx2's is httpcore2 (ssrf.py's network backend)
    "joserfc": set(),
    "authlib.jose": set(),
    "authlib.oidc": set(),
}


def _imported_modules(tree: ast.AST) -> set[str]:
    """Every absolute module a module imports, with each package above it (``a.b.c`` gives
    ``a``, ``a.b`` and ``a.b.c``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {".".join(name.split(".")[:n]) for name in names for n in range(1, name.count(".") + 2)}


def test_each_rival_library_is_imported_only_in_its_home() -> None:
    imported = {  # each module parsed once, not once per library
        str(path.relative_to(PACKAGE)): _imported_modules(ast.parse(path.read_text()))
        for path in SOURCES
    }
    found = {
        library: sorted(
            rel for rel, names in imported.items() if library in names and rel not in homes
        )
        for library, homes in _LIBRARY_HOMES.items()
    }
    assert not any(found.values()), f"imported outside their home: {found}"


def test_the_library_rule_sees_what_it_forbids() -> None:
    sample = ast.parse("import httpx\nfrom httpx import Client\nfrom . import httpx2\n")
    assert _imported_modules(sample) == {"httpx"}
    deeper = ast.parse("from authlib.oidc.core import CodeIDToken\nimport joserfc.jwk\n")
    assert {"authlib.oidc", "joserfc"} <= _imported_modules(deeper)
    assert "authlib.jose" not in _imported_modules(deeper)
