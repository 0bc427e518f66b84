"""Where the client keeps what it learned: discovery results, client registrations per issuer
and tokens per issuer + resource + client (MCP 2026-07-28 "Authorization Server Binding").

Tokens carry an absolute expiry and the server metadata is kept, so a restarted process can
refresh at once instead of authorizing again.

A storage is called synchronously. One whose ``blocking`` attribute is true (or that has none)
may wait on a disk or a lock, so :class:`~mcpauth.client.OAuth` calls it from a worker thread
when it runs on an event loop; :class:`MemoryStorage` says ``blocking = False`` and is called on
the loop.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.discovery import Discovery
from mcpauth.client.proofs import DPoPKey
from mcpauth.client.tokens import TokenSet


@dataclass(frozen=True)
class TokenKey:
    """Tokens belong to one authorization server, one resource and one client."""

    issuer: str
    resource: str
    client_id: str

    def __str__(self) -> str:
        return f"{self.issuer} {self.resource} {self.client_id}"


class TokenStorage(Protocol):
    """The storage contract. Implementations must keep secrets private (CL-22).

    Calls for one :class:`~mcpauth.client.OAuth` come one at a time, but possibly from different
    threads; a storage shared by several ``OAuth`` objects must be safe to call concurrently.
    """

    def get_discovery(self, server_url: str) -> Discovery | None: ...
    def set_discovery(self, server_url: str, discovery: Discovery) -> None: ...
    def get_client(self, issuer: str) -> ClientCredentials | None: ...
    def set_client(self, issuer: str, client: ClientCredentials) -> None: ...
    def get_tokens(self, key: TokenKey) -> TokenSet | None: ...
    def set_tokens(self, key: TokenKey, tokens: TokenSet) -> None: ...
    def delete_tokens(self, key: TokenKey) -> None: ...
    def forget(self, server_url: str) -> None:
        """Drop the discovery result for ``server_url`` and the tokens it led to."""


_T = TypeVar("_T")


class _Stored(Protocol):
    """A value kept in the document as its JSON form."""

    def to_json(self) -> dict[str, Any]: ...


class _DocumentStorage(abc.ABC):
    """The three maps as one JSON-shaped document; subclasses decide where it lives."""

    @abc.abstractmethod
    def _edit(self) -> contextlib.AbstractContextManager[dict[str, Any]]:
        """The document, for reading or changing; changes are kept when the block ends."""

    def _read(self) -> dict[str, Any]:
        with self._edit() as document:
            return document

    def _get(self, section: str, key: str, parse: Callable[[dict[str, Any]], _T]) -> _T | None:
        data = self._read()[section].get(key)
        return parse(data) if data else None

    def _set(self, section: str, key: str, value: _Stored) -> None:
        with self._edit() as document:
            document[section][key] = value.to_json()

    def get_discovery(self, server_url: str) -> Discovery | None:
        return self._get("discovery", server_url, Discovery.from_json)

    def set_discovery(self, server_url: str, discovery: Discovery) -> None:
        self._set("discovery", server_url, discovery)

    def get_client(self, issuer: str) -> ClientCredentials | None:
        return self._get("clients", issuer, ClientCredentials.from_json)

    def set_client(self, issuer: str, client: ClientCredentials) -> None:
        self._set("clients", issuer, client)

    def get_tokens(self, key: TokenKey) -> TokenSet | None:
        return self._get("tokens", str(key), TokenSet.from_json)

    def set_tokens(self, key: TokenKey, tokens: TokenSet) -> None:
        self._set("tokens", str(key), tokens)

    def delete_tokens(self, key: TokenKey) -> None:
        with self._edit() as document:
            document["tokens"].pop(str(key), None)

    def get_dpop_key(self, issuer: str) -> DPoPKey | None:
        """The DPoP key used with ``issuer`` (optional for other storages: without these two
        methods the key lives as long as the process, and so do the tokens bound to it)."""
        data = self._read().get("dpop_keys", {}).get(issuer)
        return DPoPKey.from_json(data) if isinstance(data, dict) else None

    def set_dpop_key(self, issuer: str, key: DPoPKey) -> None:
        with self._edit() as document:
            document.setdefault("dpop_keys", {})[issuer] = key.to_json()

    def forget(self, server_url: str) -> None:
        with self._edit() as document:
            found = document["discovery"].pop(server_url, None)
            if found:
                prefix = f"{found['issuer']} {found['resource']} "
                for key in [k for k in document["tokens"] if k.startswith(prefix)]:
                    del document["tokens"][key]


def _empty() -> dict[str, Any]:
    return {"version": 1, "discovery": {}, "clients": {}, "tokens": {}, "dpop_keys": {}}


class MemoryStorage(_DocumentStorage):
    """Keeps everything in this process only."""

    blocking: ClassVar[bool] = False  # never waits: called on the event loop

    def __init__(self) -> None:
        self._document = _empty()

    @contextlib.contextmanager
    def _edit(self) -> Iterator[dict[str, Any]]:
        yield self._document


def default_path() -> Path:
    """``$MCPAUTH_CLIENT_STORE``, else ``client.json`` under ``$XDG_STATE_HOME/mcpauth``."""
    explicit = os.environ.get("MCPAUTH_CLIENT_STORE")
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "mcpauth" / "client.json"


class FileStorage(_DocumentStorage):
    """A JSON file readable by its owner only (mode 0600, directory 0700), replaced atomically
    and locked while edited so two processes do not lose each other's refresh tokens.

    The lock is the operating system's lock on ``<file>.lock`` (``flock`` on Linux and macOS,
    a Windows file lock on Windows, through the ``filelock`` package): every program that uses
    the file takes it to change the file, and it is released when a process dies. Reading
    takes it only on Windows (see :meth:`_read`).
    """

    blocking: ClassVar[bool] = True  # waits on the disk and the lock: not on the event loop

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @contextlib.contextmanager
    def _edit(self) -> Iterator[dict[str, Any]]:
        from filelock import FileLock  # imported by the first edit: a read needs no lock

        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with FileLock(self.lock_path, mode=0o600):
            document = self._load()
            before = json.dumps(document, sort_keys=True)
            yield document
            if json.dumps(document, sort_keys=True) != before:
                self._write(document)

    def _read(self) -> dict[str, Any]:
        if os.name != "posix":
            return super()._read()
        # Every write replaces the file whole (os.replace), so a reader sees one version or
        # the next, never a mix, and needs no lock (on Windows a reader that holds the file
        # open would make that replace fail: there reads take the lock).
        return self._load()

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return _empty()
        except ValueError:
            return _empty()  # a corrupt file is treated as empty and rewritten
        document = _empty()
        if isinstance(data, dict):
            for name in ("discovery", "clients", "tokens", "dpop_keys"):
                if isinstance(data.get(name), dict):
                    document[name] = data[name]
        return document

    def _write(self, document: dict[str, Any]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if hasattr(os, "fchmod"):  # not on Windows before 3.13, where the mode is not POSIX
                os.fchmod(fd, 0o600)  # whatever the umask
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                fd = -1
                json.dump(document, handle, indent=2, sort_keys=True)
            os.replace(tmp, self.path)
        finally:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
