"""Protected-resource side of mcpauth: pure ASGI middleware, token verifiers, RFC 9728
metadata, scope policy and the ``mcpauth proxy`` reverse proxy.

Imports nothing from ``mcpauth.server``, Authlib or SQLModel.
"""

from mcpauth.middleware.adapters import ForSDK, FromSDK
from mcpauth.middleware.exchange import TokenExchanger
from mcpauth.middleware.identity import TokenUser, current_token, verified_token
from mcpauth.middleware.introspection import IntrospectionVerifier
from mcpauth.middleware.jwks import JWKSCache
from mcpauth.middleware.policy import ScopePolicy
from mcpauth.middleware.protected_resource import ProtectedResourceMiddleware
from mcpauth.middleware.proxy import CORSGrant, IdentityHeaders, UpstreamProxy
from mcpauth.middleware.proxy_stdio import StdioBridge
from mcpauth.middleware.resource_metadata import (
    ResourceMetadataEndpoint,
    metadata_url,
    resource_metadata,
)
from mcpauth.middleware.sender_constraint import DPoP
from mcpauth.middleware.verifier import (
    JWTVerifier,
    MultiIssuerVerifier,
    TokenVerifier,
    VerifiedToken,
)

__all__ = [
    "CORSGrant",
    "DPoP",
    "ForSDK",
    "FromSDK",
    "IdentityHeaders",
    "IntrospectionVerifier",
    "JWKSCache",
    "JWTVerifier",
    "MultiIssuerVerifier",
    "ProtectedResourceMiddleware",
    "ResourceMetadataEndpoint",
    "ScopePolicy",
    "StdioBridge",
    "TokenExchanger",
    "TokenUser",
    "TokenVerifier",
    "UpstreamProxy",
    "VerifiedToken",
    "current_token",
    "metadata_url",
    "resource_metadata",
    "verified_token",
]
