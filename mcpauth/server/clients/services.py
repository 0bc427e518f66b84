"""What the clients package reads from the running application: the settings, the database,
the client directory, the lockout cache and the clock. ``create_app`` builds one object that
has all of it (``server/context.py``, the composition root); the modules here name only this
protocol, so a reader of a signature sees what a function can touch and no module reaches a
package above its own. Every member is read-only: a request never replaces one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from starlette.requests import Request

    from mcpauth.server.clients.directory import ClientDirectory
    from mcpauth.server.config import Settings
    from mcpauth.server.operations.lockout import Lockouts
    from mcpauth.server.storage.database import Database


class ClientServices(Protocol):
    @property
    def settings(self) -> Settings: ...
    @property
    def db(self) -> Database: ...
    @property
    def clients(self) -> ClientDirectory: ...
    @property
    def lockouts(self) -> Lockouts: ...
    def now(self) -> int: ...


def client_services(request: Request) -> ClientServices:
    """The services of the application serving ``request`` (``create_app`` put them there)."""
    return cast("ClientServices", request.app.state.mcpauth)
