"""What the tokens package reads from the running application: what client authentication
needs, the signing keys, the registered resources, the issuers trusted for assertions and
workload tokens, the upstream providers (with the key that seals people's kept tokens at them)
and the DPoP nonces. ``create_app`` builds one object that has all of it
(``server/context.py``, the composition root); the modules here name only this protocol.
Every member is read-only: a request never replaces one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from mcpauth.server.clients.services import ClientServices

if TYPE_CHECKING:
    from starlette.requests import Request

    from mcpauth.dpop import DPoPNonces
    from mcpauth.server.authorization.resources import ResourceCatalog
    from mcpauth.server.identity.trusted_issuers import IdentityProviders
    from mcpauth.server.identity.upstream import UpstreamProviders
    from mcpauth.server.tokens.keys import KeyManager


class TokenServices(ClientServices, Protocol):
    @property
    def keys(self) -> KeyManager: ...
    @property
    def resources(self) -> ResourceCatalog: ...
    @property
    def idps(self) -> IdentityProviders: ...
    @property
    def workload_keys(self) -> IdentityProviders: ...
    @property
    def upstream(self) -> UpstreamProviders: ...
    @property
    def upstream_token_key(self) -> bytes: ...
    @property
    def dpop_nonces(self) -> DPoPNonces | None: ...
    def endpoint_url(self, name: str) -> str: ...


def token_services(request: Request) -> TokenServices:
    """The services of the application serving ``request`` (``create_app`` put them there)."""
    return cast("TokenServices", request.app.state.mcpauth)
