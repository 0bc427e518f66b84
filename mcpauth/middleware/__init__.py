"""Protected-resource side of mcpauth: pure ASGI middleware, token verifiers, RFC 9728
metadata, scope and tool policies (the ``mcpauth proxy`` built on them is :mod:`mcpauth.proxy`).

Imports nothing from ``mcpauth.server``, Authlib or SQLModel.
"""

from mcpauth.middleware.adapters import ForSDK, FromSDK
from mcpauth.middleware.cedar import CedarPolicy, PolicySyntaxError
from mcpauth.middleware.exchange import TokenExchanger
from mcpauth.middleware.identity import TokenUser, current_token, verified_token
from mcpauth.middleware.introspection import IntrospectionVerifier
from mcpauth.middleware.jwks import JWKSCache
from mcpauth.middleware.options import Limits, ProtectedResource, Rate, SharedState
from mcpauth.middleware.policy import ScopePolicy
from mcpauth.middleware.protected_resource import ProtectedResourceMiddleware
from mcpauth.middleware.resource_metadata import (
    ResourceMetadataEndpoint,
    metadata_url,
    resource_metadata,
)
from mcpauth.middleware.sender_constraint import DPoP
from mcpauth.middleware.tool_policy import ToolCall, ToolCaller, ToolDecision, ToolPolicy
from mcpauth.middleware.verifier import (
    JWTVerifier,
    MultiIssuerVerifier,
    TokenVerifier,
    VerifiedToken,
)

__all__ = [
    "CedarPolicy",
    "DPoP",
    "ForSDK",
    "FromSDK",
    "IntrospectionVerifier",
    "JWKSCache",
    "JWTVerifier",
    "Limits",
    "MultiIssuerVerifier",
    "PolicySyntaxError",
    "ProtectedResource",
    "ProtectedResourceMiddleware",
    "Rate",
    "ResourceMetadataEndpoint",
    "ScopePolicy",
    "SharedState",
    "TokenExchanger",
    "TokenUser",
    "TokenVerifier",
    "ToolCall",
    "ToolCaller",
    "ToolDecision",
    "ToolPolicy",
    "VerifiedToken",
    "current_token",
    "metadata_url",
    "resource_metadata",
    "verified_token",
]
