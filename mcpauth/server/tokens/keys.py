"""Signing keys: created on first use, private parts Fernet-encrypted in the database,
rotated by publishing the next key before it signs and keeping the old one published until
every token it signed has expired."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from mcpauth import jwt
from mcpauth.errors import ConfigurationError
from mcpauth.server.crypto import fernet_key
from mcpauth.server.storage import signing_keys
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.models import SigningKey

RELOAD_SECONDS = 5.0  # the default: replicas pick up a rotation done elsewhere within this long
EXPIRY_LEEWAY = 60


class KeyManager:
    """Reads and rotates the signing keys stored in the database."""

    def __init__(
        self,
        db: Database,
        *,
        secret: str,
        alg: jwt.Algorithm,
        access_token_ttl: int,
        rotation_delay: int,
        clock: Callable[[], float],
        reload_interval: float = RELOAD_SECONDS,
    ) -> None:
        self._db = db
        self._fernet = Fernet(fernet_key(secret))
        self._alg = alg
        self._ttl = access_token_ttl
        self._delay = rotation_delay
        self._clock = clock
        self._reload_interval = reload_interval
        self._lock = threading.Lock()
        self._loaded_at = float("-inf")
        self._signer: jwt.CompactSigner | None = None
        self._jwks: dict[str, Any] = {"keys": []}

    def _new_key(self, active_at: int) -> SigningKey:
        private = jwt.generate_private_key(self._alg)
        jwk = jwt.public_jwk(private.public_key(), kid="", alg=self._alg)
        kid = jwt.thumbprint(jwk)
        jwk["kid"] = kid
        encrypted = self._fernet.encrypt(jwt.private_key_to_pem(private)).decode()
        now = int(self._clock())
        return SigningKey(
            kid=kid,
            alg=self._alg,
            public_jwk=jwk,
            private_key=encrypted,
            created_at=now,
            active_at=active_at,
        )

    def ensure_key(self) -> None:
        """Create the first signing key if there is none."""
        with self._db.write() as session:
            signing_keys.add_first_key(session, lambda: self._new_key(int(self._clock())))

    def rotate(self) -> SigningKey:
        """Publish a new key now; it signs after the rotation delay, when the current keys
        stop signing; they stay published until their last token has expired."""
        now = int(self._clock())
        active_at = now + self._delay
        with self._db.write() as session:
            signing_keys.retire_current_keys(
                session, active_at, active_at + self._ttl + EXPIRY_LEEWAY
            )
            new = self._new_key(active_at)
            signing_keys.add_key(session, new)
        self._loaded_at = float("-inf")
        return new

    def list_keys(self) -> list[SigningKey]:
        with self._db.read() as session:
            return signing_keys.all_keys(session)

    def _decrypt(self, key: SigningKey) -> jwt.PrivateKey:
        try:
            return jwt.private_key_from_pem(self._fernet.decrypt(key.private_key.encode()))
        except InvalidToken as exc:
            raise ConfigurationError(
                "cannot decrypt the signing keys: MCPAUTH_SECRET_KEY differs from the one "
                "they were stored with"
            ) from exc

    def _reload(self, now: float) -> None:
        keys = self.list_keys()
        published = [k for k in keys if k.expires_at is None or k.expires_at > now]
        signing = [
            k
            for k in published
            if k.active_at <= now and (k.retired_at is None or k.retired_at > now)
        ]
        if not signing:  # a rotation whose delay has not passed yet: the old key still signs
            signing = [k for k in published if k.active_at <= now]
        if not signing:
            raise ConfigurationError("no signing key is active; run `mcpauth keys rotate`")
        current = max(signing, key=lambda k: k.active_at)
        if self._signer is None or self._signer.kid != current.kid:
            self._signer = jwt.CompactSigner(
                self._decrypt(current), alg=current.alg, kid=current.kid
            )
        self._jwks = {"keys": [k.public_jwk for k in published]}
        self._loaded_at = now

    def _fresh(self) -> None:
        now = self._clock()
        if now - self._loaded_at >= self._reload_interval or now < self._loaded_at:
            with self._lock:
                if now - self._loaded_at >= self._reload_interval or now < self._loaded_at:
                    self._reload(now)

    def cached_signer(self) -> jwt.CompactSigner | None:
        """:meth:`signer` from memory only; None if the keys would have to be read again."""
        signer, loaded_at = self._signer, self._loaded_at
        now = self._clock()
        return (
            signer if signer is not None and 0 <= now - loaded_at < self._reload_interval else None
        )

    def signer(self) -> jwt.CompactSigner:
        self._fresh()
        if self._signer is None:
            raise ConfigurationError("no signing key is loaded")
        return self._signer

    def jwks(self) -> dict[str, Any]:
        """The public JWKS: every key not yet expired, public members only."""
        self._fresh()
        return self._jwks
