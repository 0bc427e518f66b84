"""The optional packages parts of the client need, and the one line that says how to get them."""

from __future__ import annotations

import importlib
import importlib.util

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
    """Stop with the extra that brings ``modules`` unless each of them is installed; what is
    installed is imported where it is used, not here.

    Raises:
        ImportError: one is missing; the message names it and the extra to install.
    """
    module = next((m for m in modules if importlib.util.find_spec(m) is None), None)
    if module is not None:
        raise ImportError(f"{part} {install_hint(module, extra)}", name=module)
