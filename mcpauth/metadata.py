"""Documents of RFC 8414 (authorization server metadata), RFC 9728 (protected resource
metadata) and RFC 7591 (client metadata), as pydantic models shared by every part.

Unknown members are kept (``extra="allow"``) so that a document read from a foreign server
round-trips; ``to_json`` leaves out members that are unset.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AuthorizationServerMetadata",
    "ClientInformation",
    "ClientMetadata",
    "ProtectedResourceMetadata",
]


class _Document(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class AuthorizationServerMetadata(_Document):
    """RFC 8414 §2 (also served as OpenID Connect discovery)."""

    issuer: str
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    jwks_uri: str | None = None
    registration_endpoint: str | None = None
    scopes_supported: list[str] | None = None
    response_types_supported: list[str] = Field(default_factory=lambda: ["code"])
    response_modes_supported: list[str] | None = None
    grant_types_supported: list[str] | None = None
    token_endpoint_auth_methods_supported: list[str] | None = None
    dpop_signing_alg_values_supported: list[str] | None = None  # RFC 9449 §5.1
    token_endpoint_auth_signing_alg_values_supported: list[str] | None = None
    service_documentation: str | None = None
    revocation_endpoint: str | None = None
    revocation_endpoint_auth_methods_supported: list[str] | None = None
    introspection_endpoint: str | None = None
    introspection_endpoint_auth_methods_supported: list[str] | None = None
    code_challenge_methods_supported: list[str] | None = None
    authorization_response_iss_parameter_supported: bool | None = None  # RFC 9207 §3
    client_id_metadata_document_supported: bool | None = None  # CIMD draft
    device_authorization_endpoint: str | None = None  # RFC 8628 §4
    # OpenID Connect Discovery 1.0 §3
    userinfo_endpoint: str | None = None
    subject_types_supported: list[str] | None = None
    id_token_signing_alg_values_supported: list[str] | None = None
    claims_supported: list[str] | None = None


class ProtectedResourceMetadata(_Document):
    """RFC 9728 §2."""

    resource: str
    authorization_servers: list[str] | None = None
    jwks_uri: str | None = None
    scopes_supported: list[str] | None = None
    bearer_methods_supported: list[str] | None = None
    resource_signing_alg_values_supported: list[str] | None = None
    resource_name: str | None = None
    resource_documentation: str | None = None
    resource_policy_uri: str | None = None
    resource_tos_uri: str | None = None


class ClientMetadata(_Document):
    """RFC 7591 §2 client metadata as a client sends it (validation is the server's)."""

    redirect_uris: list[str] | None = None
    token_endpoint_auth_method: str | None = None
    grant_types: list[str] | None = None
    response_types: list[str] | None = None
    application_type: str | None = None
    client_name: str | None = None
    client_uri: str | None = None
    logo_uri: str | None = None
    scope: str | None = None
    contacts: list[str] | None = None
    tos_uri: str | None = None
    policy_uri: str | None = None
    jwks_uri: str | None = None
    jwks: dict[str, Any] | None = None
    software_id: str | None = None
    software_version: str | None = None


class ClientInformation(ClientMetadata):
    """RFC 7591 §3.2.1 registration response."""

    client_id: str
    client_secret: str | None = None
    client_id_issued_at: int | None = None
    client_secret_expires_at: int | None = None
    registration_access_token: str | None = None
    registration_client_uri: str | None = None
