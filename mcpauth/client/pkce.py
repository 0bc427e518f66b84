"""PKCE (RFC 7636) with S256 only, and the ``state`` value (RFC 6749 §10.12)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpauth.client.errors import PKCENotSupported
from mcpauth.oauth import s256

if TYPE_CHECKING:
    from mcpauth.metadata import AuthorizationServerMetadata


@dataclass(frozen=True)
class PKCE:
    """A code verifier and its S256 challenge."""

    verifier: str
    challenge: str
    method: str = "S256"

    @classmethod
    def generate(cls) -> PKCE:
        # RFC 7636 §4.1: 43..128 characters; 32 random bytes give 43.
        verifier = secrets.token_urlsafe(48)
        return cls(verifier, s256(verifier))


def new_state() -> str:
    return secrets.token_urlsafe(32)


def require_s256(metadata: AuthorizationServerMetadata) -> None:
    """Refuse servers that do not advertise S256.

    Raises:
        PKCENotSupported: ``code_challenge_methods_supported`` is absent or lacks ``S256``.
    """
    methods = metadata.code_challenge_methods_supported
    # MCP 2025-11-25 "Authorization Code Protection": absent → MUST refuse to proceed.
    if methods is None:
        raise PKCENotSupported(
            "the authorization server does not advertise code_challenge_methods_supported; "
            "refusing to proceed without confirmed PKCE support"
        )
    if "S256" not in methods:
        raise PKCENotSupported("the authorization server does not support PKCE S256")
