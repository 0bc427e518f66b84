"""The optional packages parts of the client need, and the one line that says how to get them."""

from __future__ import annotations

import importlib

CLIENT = ("httpx2", "filelock")  # the `client` extra
CONFORMANCE = ("mcp", *CLIENT)  # the `conformance` extra


def first_missing(modules: tuple[str, ...]) -> str | None:
    """The first of ``modules`` that cannot be imported, or ``None``."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            return module
    return None


def install_hint(module: str, extra: str) -> str:
    """``needs httpx2: pip install 'mcpauth-kit[client]'``."""
    return f"needs {module}: pip install 'mcpauth-kit[{extra}]'"


def require(modules: tuple[str, ...], *, extra: str, part: str) -> None:
    """Import ``modules`` or stop with the extra that brings them.

    Raises:
        ImportError: one is missing; the message names it and the extra to install.
    """
    module = first_missing(modules)
    if module is not None:
        raise ImportError(f"{part} {install_hint(module, extra)}", name=module)
