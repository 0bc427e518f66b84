"""Finding the authorization server for an MCP server (MCP "Authorization Server Discovery").

Protected resource metadata first (RFC 9728): the ``resource_metadata`` URL from the challenge,
else the path-aware well-known URL, else the root one. Then authorization server metadata by
RFC 8414 and OpenID Connect discovery in the order MCP 2025-11-25 fixes, with the issuer compared
byte for byte. Servers from 2025-03-26 without PRM get the old fallbacks.

:func:`discover` is a generator: it yields :class:`HTTPRequest` values and receives responses.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from mcpauth.client._http import HTTPRequest, HTTPResponse, get
from mcpauth.client.challenge import BearerChallenge
from mcpauth.client.errors import DiscoveryError, IssuerMismatch, ResourceMismatch, UnsafeURL
from mcpauth.uris import (
    URIError,
    authorization_server_metadata_urls,
    canonical_resource,
    origin,
    path_of,
    secure_or_loopback,
    well_known_url,
)

Exchange = Generator[HTTPRequest, HTTPResponse, Any]
ServerSelector = Callable[[list[str]], str]
"""Picks one issuer from the ``authorization_servers`` a resource lists (MCP leaves it to us)."""

if TYPE_CHECKING:  # pydantic is imported when a document is read (not for a stored token)
    from pydantic import BaseModel

    from mcpauth.metadata import AuthorizationServerMetadata, ProtectedResourceMetadata

PRM_SUFFIX = "oauth-protected-resource"
_Model = TypeVar("_Model", bound="BaseModel")


class Discovery:
    """What discovery found: the resource to ask for, the issuer and its metadata.

    Immutable. One read back from storage (:meth:`from_json`) checks its documents when they
    are first used, not before: reading a stored token needs neither of them.
    """

    __slots__ = ("_metadata", "_protected_resource", "issuer", "resource")

    resource: str
    issuer: str
    _metadata: AuthorizationServerMetadata | _Unchecked
    _protected_resource: ProtectedResourceMetadata | _Unchecked | None

    def __init__(
        self,
        resource: str,
        issuer: str,
        metadata: AuthorizationServerMetadata,
        protected_resource: ProtectedResourceMetadata | None = None,
    ) -> None:
        object.__setattr__(self, "resource", resource)
        object.__setattr__(self, "issuer", issuer)
        # a document, or its stored JSON until first used
        object.__setattr__(self, "_metadata", metadata)
        object.__setattr__(self, "_protected_resource", protected_resource)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Discovery is immutable: cannot set {name!r}")

    @property
    def metadata(self) -> AuthorizationServerMetadata:
        """The authorization server's metadata (RFC 8414).

        Raises:
            pydantic.ValidationError: a stored document that is not metadata.
        """
        value = self._metadata
        if isinstance(value, _Unchecked):
            from mcpauth.metadata import AuthorizationServerMetadata

            value = AuthorizationServerMetadata.model_validate(value.document)
            object.__setattr__(self, "_metadata", value)
        return value

    @property
    def protected_resource(self) -> ProtectedResourceMetadata | None:
        """The MCP server's protected resource metadata (RFC 9728); ``None`` for a
        2025-03-26 server without it.

        Raises:
            pydantic.ValidationError: a stored document that is not such metadata.
        """
        value = self._protected_resource
        if isinstance(value, _Unchecked):
            from mcpauth.metadata import ProtectedResourceMetadata

            value = ProtectedResourceMetadata.model_validate(value.document)
            object.__setattr__(self, "_protected_resource", value)
        return value

    def __repr__(self) -> str:
        return f"Discovery(resource={self.resource!r}, issuer={self.issuer!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Discovery):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]  # holds mutable documents, as it always did

    @property
    def legacy(self) -> bool:
        """True for a 2025-03-26 server without protected resource metadata."""
        return self.protected_resource is None

    def to_json(self) -> dict[str, Any]:
        prm = self.protected_resource
        return {
            "resource": self.resource,
            "issuer": self.issuer,
            "metadata": self.metadata.to_json(),
            "protected_resource": prm.to_json() if prm else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Discovery:
        """What :meth:`to_json` stored; its documents are checked when first used."""
        prm = data.get("protected_resource")
        return cls(
            data["resource"],
            data["issuer"],
            _Unchecked(data["metadata"]),  # type: ignore[arg-type]
            _Unchecked(prm) if prm else None,  # type: ignore[arg-type]
        )


class _Unchecked:
    """A stored document, not checked yet."""

    __slots__ = ("document",)

    def __init__(self, document: Any) -> None:
        self.document = document


def check_url(url: str, what: str) -> str:
    """Allow only https, or http on a loopback host (MCP security best practices, CL-23/24).

    Raises:
        UnsafeURL: any other scheme (``javascript:``, ``file:``...) or plain http elsewhere.
    """
    if secure_or_loopback(url):
        return url
    raise UnsafeURL(f"refusing {what} {url!r}: only https (or http on loopback) is allowed")


def prm_urls(server_url: str, resource_metadata: str | None) -> list[str]:
    """Where to look for protected resource metadata, in order (MCP 2025-11-25, CL-03)."""
    urls = [resource_metadata] if resource_metadata else []
    path = path_of(server_url)
    if path:
        urls.append(well_known_url(server_url, PRM_SUFFIX))  # RFC 9728 §3.1 path insertion
    urls.append(well_known_url(origin(server_url), PRM_SUFFIX))
    return urls


metadata_urls = authorization_server_metadata_urls  # RFC 8414 and OIDC, the MCP order (CL-04)


def resource_matches(resource: str, server_url: str) -> bool:
    """The PRM ``resource`` is this server's URL or a path-segment prefix of it (RFC 9728 §3.3)."""
    try:
        declared, actual = canonical_resource(resource), canonical_resource(server_url)
    except URIError:
        return False
    if origin(declared) != origin(actual):
        return False
    declared_path, actual_path = path_of(declared), path_of(actual)
    return (
        not declared_path
        or actual_path == declared_path
        or (actual_path.startswith(declared_path + "/"))
    )


def legacy_metadata(server_url: str) -> AuthorizationServerMetadata:
    """MCP 2025-03-26 default endpoints on the server's origin (path dropped)."""
    from mcpauth.metadata import AuthorizationServerMetadata

    base = origin(server_url)
    return AuthorizationServerMetadata(
        issuer=base,
        authorization_endpoint=f"{base}/authorize",
        token_endpoint=f"{base}/token",
        registration_endpoint=f"{base}/register",
        code_challenge_methods_supported=["S256"],  # 2025-03-26 required PKCE S256 of servers
    )


def _first_document(
    urls: Iterable[str], model: type[_Model]
) -> Generator[HTTPRequest, HTTPResponse, tuple[str, _Model] | None]:
    """The first of ``urls`` that answers 200 with a JSON object ``model`` accepts, and its
    URL; ``None`` when none does (a missing, unreadable or invalid document is passed over)."""
    from pydantic import ValidationError

    for url in urls:
        response = yield get(url)
        document = response.json_object() if response.status_code == 200 else None
        if document is None:
            continue
        try:
            return url, model.model_validate(document)
        except ValidationError:
            continue
    return None


def fetch_protected_resource(
    server_url: str, challenge: BearerChallenge | None
) -> Generator[HTTPRequest, HTTPResponse, ProtectedResourceMetadata | None]:
    """The first PRM document found, checked against ``server_url``; ``None`` if there is none.

    Raises:
        ResourceMismatch: the document is for another resource.
        UnsafeURL: the ``resource_metadata`` URL is not http(s).
    """
    from mcpauth.metadata import ProtectedResourceMetadata

    hinted = challenge.resource_metadata if challenge else None
    urls = (check_url(url, "resource metadata URL") for url in prm_urls(server_url, hinted))
    found = yield from _first_document(urls, ProtectedResourceMetadata)
    if found is None:
        return None
    prm = found[1]
    if not resource_matches(prm.resource, server_url):
        raise ResourceMismatch(
            f"protected resource metadata is for {prm.resource!r}, not {server_url!r}"
        )
    return prm


def fetch_metadata(
    issuer: str, *, legacy: bool = False
) -> Generator[HTTPRequest, HTTPResponse, AuthorizationServerMetadata | None]:
    """The first authorization server metadata document found for ``issuer``.

    ``legacy`` is the 2025-03-26 case: the MCP server's own origin serves the metadata, and the
    issuer it names need only share that origin.

    Raises:
        IssuerMismatch: the document's ``issuer`` is not ``issuer`` exactly (RFC 8414 §3.3).
    """
    from mcpauth.metadata import AuthorizationServerMetadata

    found = yield from _first_document(metadata_urls(issuer), AuthorizationServerMetadata)
    if found is None:
        return None
    url, metadata = found
    # MCP 2026-07-28: issuer MUST be identical; no normalization of any kind.
    if metadata.issuer != issuer and not (legacy and origin(metadata.issuer) == issuer):
        raise IssuerMismatch(
            f"metadata at {url} names issuer {metadata.issuer!r}, expected {issuer!r}"
        )
    return metadata


def first_server(servers: list[str]) -> str:
    """The default :data:`ServerSelector`: the first authorization server the resource lists."""
    return servers[0]


def discover(
    server_url: str,
    challenge: BearerChallenge | None = None,
    *,
    select: ServerSelector = first_server,
) -> Generator[HTTPRequest, HTTPResponse, Discovery]:
    """Run discovery for ``server_url``.

    Raises:
        DiscoveryError: no authorization server could be found (or one of its subclasses).
    """
    prm = yield from fetch_protected_resource(server_url, challenge)
    if prm is None:
        issuer = origin(server_url)  # 2025-03-26: the authorization base URL
    elif not prm.authorization_servers:
        raise DiscoveryError("protected resource metadata lists no authorization_servers")
    else:
        issuer = select(list(prm.authorization_servers))
    check_url(issuer, "authorization server")
    metadata = yield from fetch_metadata(issuer, legacy=prm is None)
    if metadata is None:
        if prm is not None:
            raise DiscoveryError(f"no authorization server metadata found for {issuer!r}")
        metadata = legacy_metadata(server_url)
    issuer = metadata.issuer
    for name in ("authorization_endpoint", "token_endpoint", "registration_endpoint"):
        value = getattr(metadata, name)
        if value:
            check_url(value, name)
    resource = canonical_resource(prm.resource if prm else server_url)
    return Discovery(resource, issuer, metadata, prm)
