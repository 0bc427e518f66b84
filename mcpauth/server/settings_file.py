"""Changes to the TOML settings file made by commands (``mcpauth idps add|remove``): one
``[[mcpauth.upstream]]`` table added or removed, everything else in the file, comments and
order included, kept as it was (tomlkit). The changed file is loaded and validated as a whole,
as ``serve`` would load it, before it replaces the old one; it is written beside it and renamed
over it, so neither a running command nor a crash ever sees half a file. Providers stay in the
settings, never in the database: their secrets are only ever named (an environment variable or
a file), never written here.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, Table

from mcpauth.errors import ConfigurationError
from mcpauth.server.config import Settings

Load = Callable[[Path], Settings]  # the settings as `serve` would load them from a file


def _read(path: Path) -> tomlkit.TOMLDocument:
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        return tomlkit.parse(text)
    except (OSError, UnicodeDecodeError, TOMLKitError) as exc:
        raise ConfigurationError(f"cannot read config file {path}: {exc}") from exc


def _section(doc: tomlkit.TOMLDocument) -> Any:
    """The table holding the settings: ``[mcpauth]``, or the top level of a file that has no
    such table but settings of its own (as the loader reads it)."""
    if "mcpauth" in doc:
        section = doc["mcpauth"]
        if not isinstance(section, Table):
            raise ConfigurationError("the config file's mcpauth is not a table")
        return section
    if doc.body and any(key is not None for key, _ in doc.body):
        return doc
    doc["mcpauth"] = tomlkit.table()
    return doc["mcpauth"]


def _providers(section: Any) -> AoT:
    providers = section.get("upstream")
    if providers is None:
        providers = tomlkit.aot()
        section["upstream"] = providers
    if not isinstance(providers, AoT):
        raise ConfigurationError("the config file's upstream is not a list of [[tables]]")
    return providers


def _replace(path: Path, doc: tomlkit.TOMLDocument, load: Load) -> Settings:
    """Validate the changed document as a whole, then put it in place atomically: written and
    synced beside the real file (a symbolic link is followed, not replaced), with its mode and,
    where this user may, its owner, then renamed over it."""
    real = path.resolve()
    handle, name = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    candidate = Path(name)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(tomlkit.dumps(doc))
            out.flush()
            os.fsync(out.fileno())
        settings = load(candidate)
        if real.exists():
            status = real.stat()
            os.chmod(candidate, status.st_mode & 0o777)
            with contextlib.suppress(PermissionError):
                os.chown(candidate, status.st_uid, status.st_gid)
        os.replace(candidate, real)
        folder = os.open(real.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    finally:
        candidate.unlink(missing_ok=True)
    return settings


def add_provider(path: Path, values: dict[str, Any], load: Load) -> Settings:
    """Add one provider's table (``values``: its settings, ``id`` first) to the file.

    Raises:
        ConfigurationError: the file cannot be read, already has a provider with this id,
            or would not load with it (the message names the setting).
    """
    doc = _read(path)
    providers = _providers(_section(doc))
    if any(table.get("id") == values.get("id") for table in providers):
        raise ConfigurationError(f"{path} already has a provider with the id {values.get('id')!r}")
    table = tomlkit.table()
    for key, value in values.items():
        table[key] = tomlkit.inline_table() if isinstance(value, dict) else value
        if isinstance(value, dict):
            table[key].update(value)
    providers.append(table)
    return _replace(path, doc, load)


def remove_provider(path: Path, provider_id: str, load: Load) -> Settings:
    """Remove the provider ``provider_id``'s table from the file.

    Raises:
        ConfigurationError: the file has no such provider (it may come from the
            ``MCPAUTH_UPSTREAM`` environment variable instead), or would not load without it
            (``local_accounts = false`` with no provider left).
    """
    doc = _read(path)
    section = _section(doc)
    providers = _providers(section)
    kept = [table for table in providers if table.get("id") != provider_id]
    if len(kept) == len(providers):
        raise ConfigurationError(f"{path} has no provider with the id {provider_id!r}")
    if kept:
        remaining = tomlkit.aot()
        for table in kept:
            remaining.append(table)
        section["upstream"] = remaining
    else:
        del section["upstream"]
    return _replace(path, doc, load)
