"""What the authorization package reads from the running application: what the clients and
browser packages it calls need, and the registered resources. ``create_app`` builds one object
that has all of it (``server/context.py``, the composition root); the modules here name only
this protocol. Every member is read-only: a request never replaces one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from mcpauth.server.browser.services import BrowserServices
from mcpauth.server.clients.services import ClientServices

if TYPE_CHECKING:
    from starlette.requests import Request

    from mcpauth.server.authorization.resources import ResourceCatalog


class AuthorizationServices(ClientServices, BrowserServices, Protocol):
    @property
    def resources(self) -> ResourceCatalog: ...


def authorization_services(request: Request) -> AuthorizationServices:
    """The services of the application serving ``request`` (``create_app`` put them there)."""
    return cast("AuthorizationServices", request.app.state.mcpauth)
