"""Server-issued DPoP nonces (RFC 9449 §8) that every replica accepts without shared state.

A nonce is an HMAC of its time window under a key derived from the server secret: any replica
with the same secret makes and checks the same values, nothing is stored, and a nonce made in
the current or the previous window is accepted, so each lives between one and two windows. A
proof carrying no nonce or another one gets ``use_dpop_nonce`` with the current nonce in
``DPoP-Nonce``; every token response carries the current one, so a client learns the next
nonce before the old one runs out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

WINDOW_SECONDS = 120


class DPoPNonces:
    def __init__(self, key: bytes, window: int = WINDOW_SECONDS) -> None:
        self._key = key
        self._window = window

    def _for(self, index: int) -> str:
        mac = hmac.new(self._key, f"dpop-nonce:{index}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac[:18]).decode("ascii")

    def current(self, now: int) -> str:
        """The nonce to hand out at ``now``."""
        return self._for(now // self._window)

    def accepts(self, nonce: str | None, now: int) -> bool:
        """Whether ``nonce`` was made in this window or the previous one."""
        if not nonce:
            return False
        index = now // self._window
        valid = (self._for(index), self._for(index - 1))
        return any(hmac.compare_digest(nonce.encode(), v.encode()) for v in valid)
