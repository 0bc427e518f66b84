"""The grouped values :class:`~mcpauth.middleware.ProtectedResourceMiddleware` is configured with,
besides :class:`~mcpauth.middleware.ScopePolicy` and :class:`~mcpauth.middleware.DPoP`:

- :class:`ProtectedResource`: this server as its RFC 9728 metadata describes it (its URI, a
  name and documentation for people, the scopes it lists);
- :class:`Limits`: the bounds on what one request may make the middleware read or keep, and
  how many requests a caller may make (and how many tool calls, each a :class:`Rate`);
- :class:`SharedState`: the Redis server that replicas share what they must agree on (each
  DPoP proof's single use, the rate counts, introspection verdicts).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from urllib.parse import urlsplit

from mcpauth.middleware._bearer import DEFAULT_MAX_HEADER_BYTES

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Limits", "ProtectedResource", "Rate", "SharedState"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_SHARED_STATE_TIMEOUT = 0.25
ANY_TOOL = "*"  # Limits.tool_rates: the rate of every tool not named
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0}
_UNITS |= {"h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}
_RATE = re.compile(r"([0-9]+)/([0-9]*)([a-z]+)(?::([0-9]+))?")


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
class Rate:
    """A token bucket: ``calls`` every ``per`` seconds on average, at most ``burst`` of them at
    once (default ``calls``). The bucket holds ``burst`` tokens and gains ``calls / per`` a
    second; each call takes one, and a call that finds none is refused until one is back.

    Raises:
        ValueError: ``calls`` or ``burst`` below 1, or ``per`` not a positive number of seconds.
    """

    calls: int
    per: float = 60.0
    burst: int | None = None

    def __post_init__(self) -> None:
        if self.calls < 1 or (self.burst is not None and self.burst < 1):
            raise ValueError("a rate's calls and burst must be at least 1")
        if not 0 < self.per < math.inf:
            raise ValueError("a rate's period must be a positive number of seconds")

    @property
    def capacity(self) -> int:
        """The most tokens the bucket holds: the calls that may come at once."""
        return self.burst if self.burst is not None else self.calls

    @property
    def refill(self) -> float:
        """Tokens gained per second."""
        return self.calls / self.per

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``CALLS/[N]UNIT[:BURST]``: ``60/min``, ``10/30s``, ``1000/h:50``, ``5/s:20``; the
        units are ``s``, ``min`` (or ``m``), ``h`` and ``d`` (and their long names).

        Raises:
            ValueError: not of that form, or a rate :class:`Rate` refuses.
        """
        found = _RATE.fullmatch(text.strip().lower())
        if found is None or found[3] not in _UNITS:
            raise ValueError(f"expected a rate such as 60/min or 10/30s:20, got {text!r}")
        calls, count, unit, burst = found.groups()
        per = (int(count) if count else 1) * _UNITS[unit]
        return cls(int(calls), per, int(burst) if burst else None)


@dataclass(frozen=True)
class Limits:
    """What one request may make the middleware read, and how much it remembers.

    ``max_header_bytes``: the longest ``Authorization`` value decoded (longer is refused before
    any parsing). ``max_body_bytes``: the largest JSON-RPC body read when a scope decision
    depends on it (larger gets 413). ``token_cache_size``: verified tokens kept until they
    expire. ``session_table_size``: MCP session ids remembered with the caller they belong to.
    ``rate_limit``: the requests one caller (issuer, subject and client of its token) may make
    in ``rate_window`` seconds, counted from its first one; one more gets 429 with
    ``Retry-After`` until the window ends (``None``, the default: no limit). The counts are
    this process's, or every replica's with :class:`SharedState`.

    ``user_rate``: the ``tools/call`` requests one user (issuer and subject of its token,
    whatever the client) may make, all tools together; ``tool_rates``: those of one tool by one
    user, per tool name (``"*"``: every tool not named). Each is a :class:`Rate` (a token
    bucket); a call over either gets 429 with ``Retry-After`` and a JSON-RPC error naming the
    limit, and takes no token from the other. ``bucket_table_size``: the buckets this process
    keeps (the least recently used is dropped past it); with :class:`SharedState` they are in
    Redis, shared by every replica.

    Raises:
        ValueError: a limit below 1, or a window that is not a positive number of seconds.
    """

    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    token_cache_size: int = 10_000
    session_table_size: int = 10_000
    rate_limit: int | None = None
    rate_window: float = 60.0
    user_rate: Rate | None = None
    tool_rates: Mapping[str, Rate] | None = None
    bucket_table_size: int = 100_000

    def __post_init__(self) -> None:
        if self.tool_rates is not None:  # a copy: what the caller keeps cannot change it
            object.__setattr__(self, "tool_rates", MappingProxyType(dict(self.tool_rates)))
        for name in (
            "max_header_bytes",
            "max_body_bytes",
            "token_cache_size",
            "session_table_size",
            "bucket_table_size",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.rate_limit is not None and self.rate_limit < 1:
            raise ValueError("rate_limit must be at least 1 (None: no limit)")
        if not 0 < self.rate_window < math.inf:
            raise ValueError("rate_window must be a positive number of seconds")


@dataclass(frozen=True)
class SharedState:
    """The Redis server the replicas of one resource share, so that they act as one: a DPoP
    proof is single-use across all of them, a caller's requests are counted by all of them
    (:attr:`Limits.rate_limit`), and an introspection verdict one replica obtained is reused by
    the others until it expires. Without it each process keeps its own.

    ``url``: ``redis://[user:password@]host[:port][/db]``, or ``rediss://`` for TLS.
    ``timeout``: the most seconds one Redis call may take, connecting included; past it (or
    when Redis cannot be reached) a request that needs Redis gets 503 with ``Retry-After``,
    never a pass. ``prefix``: the start of every key (several deployments on one Redis). Pass
    the URL alone as ``shared_state=`` when the rest is the default. Needs the
    ``shared-state`` extra (``pip install 'mcpauth-kit[shared-state]'``).

    Raises:
        ValueError: a URL that is not ``redis://`` or ``rediss://`` with a host, a timeout that
            is not a positive number of seconds, or an empty prefix.
    """

    url: str
    timeout: float = DEFAULT_SHARED_STATE_TIMEOUT
    prefix: str = "mcpauth"

    def __post_init__(self) -> None:
        try:
            parts = urlsplit(self.url)
            host, _ = parts.hostname, parts.port  # a port that is not a number raises
        except ValueError:
            parts, host = None, None
        if parts is None or parts.scheme not in ("redis", "rediss") or not host:
            raise ValueError("shared_state must be a redis:// or rediss:// URL with a host")
        if not 0 < self.timeout < math.inf:
            raise ValueError("the shared state timeout must be a positive number of seconds")
        if not self.prefix:
            raise ValueError("the shared state key prefix must not be empty")

    def __repr__(self) -> str:
        # the URL may hold a password: never in a log line or a traceback
        parts = urlsplit(self.url)
        where = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return f"SharedState({where + parts.path!r}, timeout={self.timeout!r})"
