"""What the browser package reads from the running application: the settings, the database,
the clock, endpoint URLs, the cookie secret, password hashing, the upstream providers (with
the key that seals people's kept tokens at them) and the key that seals TOTP secrets.
``create_app`` builds one object that has all of it (``server/context.py``, the composition
root); the modules here name only this protocol. Every member is read-only: a request never
replaces one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from starlette.requests import Request

    from mcpauth.server.config import Settings
    from mcpauth.server.identity.passwords import Passwords
    from mcpauth.server.identity.upstream import UpstreamProviders
    from mcpauth.server.storage.database import Database


class BrowserServices(Protocol):
    @property
    def settings(self) -> Settings: ...
    @property
    def db(self) -> Database: ...
    @property
    def cookie_secret(self) -> bytes: ...
    @property
    def passwords(self) -> Passwords: ...
    @property
    def upstream(self) -> UpstreamProviders: ...
    @property
    def upstream_token_key(self) -> bytes: ...
    @property
    def second_factor_key(self) -> bytes: ...
    def now(self) -> int: ...
    def endpoint_url(self, name: str) -> str: ...


def browser_services(request: Request) -> BrowserServices:
    """The services of the application serving ``request`` (``create_app`` put them there)."""
    return cast("BrowserServices", request.app.state.mcpauth)
