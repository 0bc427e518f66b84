"""The public API is what each ``__all__`` says, and nothing else (docs/api): every package and
shared module users import has a curated ``__all__``; every name in it exists and is documented
on its reference page; a package's ``__init__`` binds no public name it does not list; no
exported object reports a private module as its home; and the examples of docs/api/shared.md
run as written."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
# each public package or module, and the reference page that documents it
PAGES = {
    "mcpauth.server": "server.md",
    "mcpauth.middleware": "middleware.md",
    "mcpauth.client": "client.md",
    "mcpauth.proxy": "proxy.md",
    "mcpauth.errors": "shared.md",
    "mcpauth.metadata": "shared.md",
    "mcpauth.uris": "shared.md",
    "mcpauth.jwt": "shared.md",
    "mcpauth.dpop": "shared.md",
    "mcpauth.oauth": "shared.md",
}
PACKAGES = [name for name in PAGES if (ROOT / name.replace(".", "/")).is_dir()]
# the top-level modules and packages users do not import, and why
INTERNAL = {
    "mcpauth.asgi": "the ASGI types and the bounded body reader the parts share",
    "mcpauth.caching": "HTTP freshness and the wall clock, shared by the parts",
    "mcpauth.cli": "the `mcpauth` command (its interface is the command line)",
    "mcpauth.demo": "`mcpauth demo`",
    "mcpauth.key_sets": "the one key-set cache behind the parts' verifiers",
    "mcpauth.tracing": "configured by the OTEL_* environment variables, not from Python",
}


def test_every_top_level_module_is_public_with_a_page_or_named_internal() -> None:
    """A new module or package is either documented public API (``PAGES``, so its ``__all__``
    is checked) or listed here as internal with a reason: none escapes the checks silently."""
    found = {
        f"mcpauth.{p.stem if p.suffix == '.py' else p.name}"
        for p in (ROOT / "mcpauth").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert found - set(PAGES) - set(INTERNAL) == set(), "neither public nor named internal"
    assert (set(PAGES) | set(INTERNAL)) - found == set(), "listed but gone"


def exported(name: str) -> list[str]:
    module = importlib.import_module(name)
    names = getattr(module, "__all__", None)
    assert isinstance(names, list), f"{name} has no __all__ list"
    return names


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_name_in_all_exists_once_and_is_documented(name: str) -> None:
    module = importlib.import_module(name)
    names = exported(name)
    assert len(names) == len(set(names)), f"{name}.__all__ lists a name twice"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
    page = (API / PAGES[name]).read_text()
    undocumented = [n for n in names if f"`{n}" not in page]
    assert not undocumented, f"docs/api/{PAGES[name]} does not document {undocumented}"


@pytest.mark.parametrize("name", PACKAGES)
def test_a_package_binds_no_public_name_it_does_not_list(name: str) -> None:
    package = importlib.import_module(name)
    public = {  # dir(): also the names a package imports on first use (server, client)
        n
        for n in dir(package)
        if not n.startswith("_") and not isinstance(getattr(package, n), ModuleType)
    }
    assert public == set(exported(name)), public ^ set(exported(name))


@pytest.mark.parametrize("name", sorted(PAGES))
def test_no_private_module_leaks_through_all(name: str) -> None:
    module = importlib.import_module(name)
    for n in exported(name):
        value = getattr(module, n)
        assert not n.startswith("_"), f"{name}.__all__ lists the private name {n}"
        assert not isinstance(value, ModuleType), f"{name}.__all__ lists the module {n}"
        home = getattr(value, "__module__", None) if inspect.isclass(value) else None
        if inspect.isfunction(value):
            home = value.__module__
        if home is not None and home.startswith("mcpauth."):
            private = [part for part in home.split(".") if part.startswith("_")]
            assert not private, f"{name}.{n} says it lives in the private module {home}"


def test_importing_the_proxy_loads_no_server_client_authlib_sqlmodel_or_mcp() -> None:
    code = (
        "import sys, mcpauth.proxy, mcpauth.proxy.cli\n"
        "bad = [m for m in ('mcpauth.server', 'mcpauth.client', 'authlib', 'sqlmodel', 'mcp')"
        " if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_importing_the_middleware_does_not_load_the_proxy() -> None:
    code = "import sys, mcpauth.middleware\nprint('mcpauth.proxy' in sys.modules)\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


SHARED = API / "shared.md"
BLOCKS = re.findall(r"```python\n(.*?)```", SHARED.read_text(), re.S)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_example_of_the_shared_modules_runs(block: str) -> None:
    exec(compile(block, str(SHARED), "exec"), {"__name__": "docs_example"})  # noqa: S102
