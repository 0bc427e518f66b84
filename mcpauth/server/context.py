"""The per-application state every endpoint reads: settings, database, keys, clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from starlette.requests import Request

from mcpauth.server.config import Settings
from mcpauth.server.directory import ClientDirectory
from mcpauth.server.idp import IdentityProviders
from mcpauth.server.keys import KeyManager
from mcpauth.server.storage.database import Database
from mcpauth.uris import path_of


def wall_clock() -> float:
    """The default clock (looked up on each call, so freezegun can move it)."""
    return time.time()


@dataclass
class ServerContext:
    settings: Settings
    db: Database
    keys: KeyManager
    clock: Callable[[], float]
    cookie_secret: bytes
    idps: IdentityProviders = field(default_factory=lambda: IdentityProviders({}))
    directory: ClientDirectory | None = None

    def __post_init__(self) -> None:
        if self.directory is None:
            self.directory = ClientDirectory(self.settings)

    @property
    def clients(self) -> ClientDirectory:
        if self.directory is None:  # set in __post_init__
            raise RuntimeError("no client directory")
        return self.directory

    def now(self) -> int:
        return int(self.clock())

    @property
    def base_path(self) -> str:
        """The issuer's path: every endpoint lives below it."""
        return path_of(self.settings.issuer)

    def endpoint_url(self, name: str) -> str:
        return f"{self.settings.issuer.rstrip('/')}/{name}"


def get_context(request: Request) -> ServerContext:
    return cast(ServerContext, request.app.state.mcpauth)
