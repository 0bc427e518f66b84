"""Random handles and their digests (docs/security.md T18), and the server secret from which
the key-encryption key and the cookie-signing key are derived."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mcpauth.errors import ConfigurationError
from mcpauth.oauth import same_secret

log = logging.getLogger("mcpauth.server")
TOKEN_BYTES = 32  # 256 bits: guessing probability far below 2^-128 (OAuth 2.1 §7.1.2)


def new_token() -> str:
    """A fresh bearer handle (code, refresh token, client secret...) with 256 random bits."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def new_id() -> str:
    """A random opaque identifier (128 bits), for rows a user never has to type."""
    return secrets.token_hex(16)


def digest(value: str) -> str:
    """The SHA-256 hex digest under which a secret is stored and looked up."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def matches(value: str, stored_digest: str | None) -> bool:
    """Constant-time comparison of a presented secret with a stored digest."""
    if stored_digest is None:
        return False
    return same_secret(digest(value), stored_digest)


def derive_key(secret: str, purpose: str) -> bytes:
    """A 32-byte key for ``purpose`` derived from the server secret (HKDF-SHA256)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose.encode())
    return hkdf.derive(secret.encode("utf-8"))


def seal(key: bytes, plaintext: bytes, associated: bytes) -> str:
    """``plaintext`` encrypted with AES-GCM under ``key`` (a :func:`derive_key` key), bound to
    ``associated`` (what the row is: a copy moved to another row opens to nothing), base64url."""
    nonce = os.urandom(12)
    sealed = nonce + AESGCM(key).encrypt(nonce, plaintext, associated)
    return base64.urlsafe_b64encode(sealed).decode("ascii")


def unseal(key: bytes, value: str, associated: bytes) -> bytes | None:
    """What :func:`seal` sealed; None when it does not open (another key or row, altered)."""
    try:
        raw = base64.urlsafe_b64decode(value.encode("ascii"))
        return AESGCM(key).decrypt(raw[:12], raw[12:], associated)
    except (InvalidTag, ValueError):
        return None


def fernet_key(secret: str) -> bytes:
    return base64.urlsafe_b64encode(derive_key(secret, "mcpauth signing-key encryption"))


def resolve_server_secret(configured: str | None, sqlite_file: Path | None) -> str:
    """The configured secret; for an embedded SQLite database (``sqlite_file``) one generated
    beside it.

    Raises:
        ConfigurationError: no secret is configured for a non-SQLite database.
    """
    if configured:
        if len(configured) < 16:
            raise ConfigurationError("secret_key must be at least 16 characters")
        return configured
    if sqlite_file is None:
        raise ConfigurationError(
            "MCPAUTH_SECRET_KEY is required for this database: it encrypts the signing keys "
            "and signs cookies, and every replica must share it"
        )
    path = sqlite_file.with_suffix(".secret")
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    log.warning(
        "generated a server secret in %s; set MCPAUTH_SECRET_KEY in production and keep it safe",
        path,
    )
    return value
