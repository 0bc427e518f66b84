"""Session and state-handle binding (MCP RS-19, RS-20): an ``Mcp-Session-Id`` belongs to the
principal whose request it was issued in. The table is bounded; an id it does not know is
refused rather than trusted, so eviction fails closed (the client starts a new session).

A refusal is 404 "Session not found", not 403: it is what the Streamable HTTP transport
answers for an unknown session (a conforming client then opens a new one, under its own
identity), it tells the other subject nothing about whether the session exists, and it cannot
be mistaken for a 403 ``insufficient_scope`` step-up challenge. The MCP SDK's session manager
answers the same way.
"""

from __future__ import annotations

from collections import OrderedDict

Principal = tuple[str | None, str | None, str]


class SessionBindings:
    """``session id → (issuer, subject, client_id)``, at most ``max_entries``."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._owners: OrderedDict[str, Principal] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def allows(self, session_id: str, principal: Principal) -> bool:
        """True when ``session_id`` was issued to ``principal``; unknown ids are refused."""
        owner = self._owners.get(session_id)
        if owner is None or owner != principal:
            return False
        self._owners.move_to_end(session_id)
        return True

    def bind(self, session_id: str, principal: Principal) -> None:
        """Record the owner of a newly issued id; an id already owned keeps its owner."""
        if session_id in self._owners:
            return
        self._owners[session_id] = principal
        while len(self._owners) > self.max_entries:
            self._owners.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """Drop an ended session."""
        self._owners.pop(session_id, None)
