"""Speaking to an authorization server that departs from what MCP asks of it.

MCP sends the RFC 8707 ``resource`` (the MCP server's URL) in every authorization and token
request, asks for the scopes the server's challenge or metadata name, and refuses a server that
does not advertise PKCE S256. Some servers in use differ: Microsoft Entra ID's v2.0 endpoints
refuse ``resource`` (``AADSTS901002``), know an API's scopes only as
``api://<application id>/<scope>``, and support S256 without advertising it; others take
``resource`` but know the API by another identifier. :class:`ServerCompatibility`, given as
``Policy(compatibility=...)``, says how to talk to such a server: omit or replace ``resource``,
rename scopes on the wire (and back in token responses, so that step-up still compares the MCP
server's own scope names), and take S256 as supported. The default changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from mcpauth.oauth import SCOPE_TOKEN, MalformedScope, format_scope, parse_scope

# scopes of OpenID Connect itself: never prefixed (they are the server's own, not the API's)
OPENID_SCOPES = frozenset({"openid", "profile", "email", "address", "phone", "offline_access"})


def _check_scopes(value: str, what: str) -> None:
    try:
        parse_scope(value, strict=True)
    except MalformedScope:
        raise ValueError(f"{what} is not a list of scope tokens: {value!r}") from None


@dataclass(frozen=True)
class ServerCompatibility:
    """How to send ``resource`` and scopes to one kind of authorization server.

    ``send_resource``: False omits RFC 8707 ``resource`` from the authorization and token
    requests (servers that refuse it). ``resource``: sent instead of the MCP server's URL
    (servers that know the API by another identifier). ``scope_map``: an MCP scope → the
    server's scope(s) for it (space-separated; ``""`` leaves it out). ``scope_prefix``: put in
    front of every other scope that is not an OpenID Connect one (``openid``, ``profile``,
    ``email``, ``offline_access``…). ``assume_pkce_s256``: use PKCE S256 although the server's
    metadata does not list it (only for a server documented to support it). ``issuer``: the
    authorization server these settings are for; any other is refused before anything is sent
    (so a policy shared by programs talking to several MCP servers never sends one server's
    token request, and its token, the way meant for another).
    """

    send_resource: bool = True
    resource: str | None = None
    issuer: str | None = None
    scope_map: Mapping[str, str] = field(default_factory=dict)
    scope_prefix: str = ""
    assume_pkce_s256: bool = False

    def __post_init__(self) -> None:
        if not self.send_resource and self.resource:
            raise ValueError("give resource or send_resource=False, not both")
        if isinstance(self.scope_map, str):
            raise TypeError("scope_map maps each MCP scope to the server's scope")
        for name, value in self.scope_map.items():
            if not SCOPE_TOKEN.match(name):
                raise ValueError(f"a scope_map key is one scope, not {name!r}")
            _check_scopes(value, f"scope_map[{name!r}]")
        if self.scope_prefix and not SCOPE_TOKEN.match(self.scope_prefix):
            raise ValueError(
                f"scope_prefix has characters no scope may have: {self.scope_prefix!r}"
            )
        object.__setattr__(self, "scope_map", MappingProxyType(dict(self.scope_map)))

    @classmethod
    def entra_id(cls, application_id_uri: str, issuer: str | None = None) -> ServerCompatibility:
        """Microsoft Entra ID's v2.0 endpoints: no ``resource``, every MCP scope as
        ``<application ID URI>/<scope>`` (``api://<application id>`` unless the API's
        registration set another), S256 although its metadata does not say so; ``issuer``
        (``https://login.microsoftonline.com/<tenant id>/v2.0``) limits it to that tenant."""
        return cls(
            send_resource=False,
            scope_prefix=application_id_uri.rstrip("/") + "/",
            assume_pkce_s256=True,
            issuer=issuer,
        )

    def resource_for(self, resource: str) -> str | None:
        """The ``resource`` to send for the MCP server's ``resource`` (None: none)."""
        if not self.send_resource:
            return None
        return self.resource or resource

    def scope_out(self, scope: str | None) -> str | None:
        """MCP scopes as the server knows them."""
        if not scope:
            return scope
        sent: list[str] = []
        for token in parse_scope(scope):
            if token in self.scope_map:
                sent += parse_scope(self.scope_map[token])
            elif token in OPENID_SCOPES or not self.scope_prefix:
                sent.append(token)
            else:
                sent.append(self.scope_prefix + token)
        return format_scope(sent) or None

    def scope_in(self, scope: str | None) -> str | None:
        """The server's scopes (a token response's ``scope``) back as MCP scopes."""
        if not scope or not (self.scope_map or self.scope_prefix):
            return scope
        back = {
            value: name for name, value in self.scope_map.items() if len(parse_scope(value)) == 1
        }
        named: list[str] = []
        for token in parse_scope(scope):
            if token in back:
                named.append(back[token])
            elif self.scope_prefix and token.startswith(self.scope_prefix):
                named.append(token[len(self.scope_prefix) :])
            else:
                named.append(token)
        return format_scope(named)

    def token_form(self, form: dict[str, str]) -> dict[str, str]:
        """A token request's form with ``resource`` and ``scope`` as this server takes them."""
        adapted = dict(form)
        for name, adapt in (("resource", self.resource_for), ("scope", self.scope_out)):
            if name in adapted:
                value = adapt(adapted[name])
                if value is None:
                    del adapted[name]
                else:
                    adapted[name] = value  # in its place: the form keeps its order
        return adapted
