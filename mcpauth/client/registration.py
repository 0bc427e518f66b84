"""Getting a client ID (MCP "Client Registration Approaches", CL-07..CL-11).

Priority: pre-registered credentials, then a Client ID Metadata Document URL when the server
advertises support, then dynamic client registration (RFC 7591), else a clear error.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from mcpauth.client._http import HTTPRequest, HTTPResponse, post_json
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.errors import RegistrationError
from mcpauth.oauth import DEVICE_CODE, SECRET_METHODS
from mcpauth.uris import is_loopback_host

if TYPE_CHECKING:  # pydantic is imported when a registration is made (not for a stored token)
    from mcpauth.metadata import AuthorizationServerMetadata


@dataclass(frozen=True)
class Registration:
    """How this client presents itself when it has no client ID yet.

    ``client_metadata_url`` is a Client ID Metadata Document URL (https, with a path): used as
    the client ID when the authorization server supports such documents, so nothing is
    registered. Otherwise the client registers dynamically (RFC 7591) under ``client_name``
    (shown on the consent and account pages), with ``software_id``, ``software_version`` and
    ``scope`` sent as the RFC 7591 §2 fields of those names when set.
    """

    client_name: str = "mcpauth client"
    client_metadata_url: str | None = None
    software_id: str | None = None
    software_version: str | None = None
    scope: str | None = None


def check_preregistered(credentials: ClientCredentials, issuer: str) -> ClientCredentials:
    """Bind pre-registered credentials to ``issuer``.

    Raises:
        RegistrationError: they were registered with another authorization server (CL-11).
    """
    if credentials.issuer is not None and credentials.issuer != issuer:
        raise RegistrationError(
            f"the pre-registered client is for {credentials.issuer!r}, but this server uses "
            f"{issuer!r}; register a client there"
        )
    return credentials.bound_to(issuer)


def cimd_credentials(
    options: Registration, metadata: AuthorizationServerMetadata
) -> ClientCredentials | None:
    """The CIMD URL as client ID, when both sides support it (CL-08)."""
    if options.client_metadata_url and metadata.client_id_metadata_document_supported:
        return ClientCredentials(client_id=options.client_metadata_url, source="cimd")
    return None


def application_type(redirect_uris: list[str]) -> str:
    """``native`` for loopback redirects (RFC 8252), ``web`` otherwise (MCP 2026-07-28, CL-10)."""
    hosts = [urlsplit(uri).hostname for uri in redirect_uris]
    return "native" if hosts and all(is_loopback_host(h) for h in hosts) else "web"


def choose_auth_method(metadata: AuthorizationServerMetadata) -> str:
    """``none`` when allowed (a public native client), else a secret method the AS accepts."""
    # RFC 8414 §2: omitted means client_secret_basic only.
    supported = metadata.token_endpoint_auth_methods_supported or ["client_secret_basic"]
    for method in ("none", *SECRET_METHODS):
        if method in supported:
            return method
    return "none"


CODE_GRANTS = ("authorization_code", "refresh_token")  # MCP 2026-07-28 "Refresh Tokens"
DEVICE_GRANTS = (DEVICE_CODE, "refresh_token")  # RFC 8628: no redirect URI, no response type


def registration_request(
    metadata: AuthorizationServerMetadata,
    options: Registration,
    redirect_uris: list[str],
    grant_types: tuple[str, ...] = CODE_GRANTS,
) -> HTTPRequest:
    """The RFC 7591 §3.1 registration request (a device grant's client registers no
    redirect URI and says it is a native application).

    Raises:
        RegistrationError: the server has no registration endpoint.
    """
    from mcpauth.metadata import ClientMetadata

    if not metadata.registration_endpoint:
        raise RegistrationError(
            "the authorization server supports neither client ID metadata documents nor dynamic "
            "registration; pass a pre-registered client_id"
        )
    document = ClientMetadata(
        client_name=options.client_name,
        redirect_uris=redirect_uris,
        grant_types=list(grant_types),
        response_types=["code"] if "authorization_code" in grant_types else [],
        token_endpoint_auth_method=choose_auth_method(metadata),
        application_type=application_type(redirect_uris) if redirect_uris else "native",
        software_id=options.software_id,
        software_version=options.software_version,
        scope=options.scope,
    )
    return post_json(metadata.registration_endpoint, document.to_json())


def parse_registration_response(
    response: HTTPResponse, issuer: str, grant_types: tuple[str, ...] = CODE_GRANTS
) -> ClientCredentials:
    """Credentials from an RFC 7591 §3.2 response, bound to ``issuer``.

    Raises:
        RegistrationError: an error response (its code and description are in the message).
    """
    from pydantic import ValidationError

    from mcpauth.metadata import ClientInformation

    body = response.json_object()
    if response.status_code not in (200, 201) or body is None:
        body = body or {}
        error = body.get("error") or f"HTTP {response.status_code}"
        description = body.get("error_description") or ""
        raise RegistrationError(
            f"dynamic client registration failed: {error} {description}".strip()
        )
    try:
        info = ClientInformation.model_validate(body)
    except ValidationError as exc:
        raise RegistrationError("the registration response has no client_id") from exc
    method = info.token_endpoint_auth_method or (
        "client_secret_basic" if info.client_secret else "none"
    )
    if method in SECRET_METHODS and not info.client_secret:
        method = "none"
    return ClientCredentials(
        client_id=info.client_id,
        client_secret=info.client_secret,
        auth_method=method,
        issuer=issuer,
        source="dcr",
        grant_types=tuple(info.grant_types or grant_types),
    )


def register(
    metadata: AuthorizationServerMetadata,
    options: Registration,
    redirect_uris: list[str],
    issuer: str,
    grant_types: tuple[str, ...] = CODE_GRANTS,
) -> Generator[HTTPRequest, HTTPResponse, ClientCredentials]:
    """Dynamic client registration as a generator step.

    Raises:
        RegistrationError: no endpoint or the server refused (CL-10: a clear error).
    """
    response = yield registration_request(metadata, options, redirect_uris, grant_types)
    return parse_registration_response(response, issuer, grant_types)
