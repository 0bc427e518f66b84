"""The grouped values :class:`~mcpauth.middleware.ProtectedResourceMiddleware` is configured with,
besides :class:`~mcpauth.middleware.ScopePolicy` and :class:`~mcpauth.middleware.DPoP`:

- :class:`ProtectedResource`: this server as its RFC 9728 metadata describes it (its URI, a
  name and documentation for people, the scopes it lists);
- :class:`Limits`: the bounds on what one request may make the middleware read or keep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mcpauth.middleware._bearer import DEFAULT_MAX_HEADER_BYTES

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Limits", "ProtectedResource"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ProtectedResource:
    """This MCP server as a protected resource (RFC 9728 §2).

    ``uri`` is its canonical URI (``https://host/mcp``): tokens must name it in ``aud``. ``name``
    and ``documentation`` become ``resource_name`` and ``resource_documentation``.
    ``scopes_supported`` is what the metadata lists (default: the policy's required scopes).
    Pass a plain URI string as ``resource=`` when none of the rest is needed.

    Raises:
        TypeError: ``scopes_supported`` is one string instead of a sequence of scope names.
    """

    uri: str
    name: str | None = None
    documentation: str | None = None
    scopes_supported: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.scopes_supported, str):
            raise TypeError("scopes_supported is a sequence of scope names, not one string")
        if self.scopes_supported is not None:
            object.__setattr__(self, "scopes_supported", tuple(self.scopes_supported))


@dataclass(frozen=True)
class Limits:
    """What one request may make the middleware read, and how much it remembers.

    ``max_header_bytes``: the longest ``Authorization`` value decoded (longer is refused before
    any parsing). ``max_body_bytes``: the largest JSON-RPC body read when a scope decision
    depends on it (larger gets 413). ``token_cache_size``: verified tokens kept until they
    expire. ``session_table_size``: MCP session ids remembered with the caller they belong to.

    Raises:
        ValueError: a limit below 1.
    """

    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    token_cache_size: int = 10_000
    session_table_size: int = 10_000

    def __post_init__(self) -> None:
        for name in (
            "max_header_bytes",
            "max_body_bytes",
            "token_cache_size",
            "session_table_size",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
