"""Time-based one-time passwords (RFC 6238, with ``pyotp``) and recovery codes: what a code is,
which time step it belongs to, and how a recovery code is written, read and stored.

A code is accepted for the current 30-second step and one step either side (RFC 6238 §5.2: a
clock a little off, a code typed as it changed); the step it matched is returned so the caller
accepts each step once (§5.2: "the verifier MUST NOT accept the second attempt of the same
OTP"). Recovery codes are 80 random bits, shown once and stored as the SHA-256 digest of the
user id and the code (docs/security.md T46)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpauth.oauth import same_secret

if TYPE_CHECKING:
    import pyotp

DIGITS = 6
PERIOD = 30  # seconds of a time step
WINDOW = 1  # steps accepted either side of the current one
RECOVERY_CODES = 10  # made at a time
_RECOVERY_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i to mistake
_RECOVERY_LENGTH = 16  # characters: 16 * log2(31), about 79 bits
_RECOVERY_INPUT = 40  # a typed recovery code longer than this is not one


@dataclass(frozen=True)
class Enrolment:
    """A new secret and the ``otpauth://`` URI an authenticator app scans."""

    secret: str  # base32, 160 bits (RFC 4226 §4 recommends them)
    uri: str

    def __repr__(self) -> str:
        return "Enrolment(...)"  # the secret is never printed

    @property
    def grouped(self) -> str:
        """The secret in groups of four, for typing it into an app by hand."""
        return " ".join(self.secret[i : i + 4] for i in range(0, len(self.secret), 4))


def _totp(secret: str) -> pyotp.TOTP:
    import pyotp  # loaded by the first code checked, not by every start

    return pyotp.TOTP(secret, digits=DIGITS, interval=PERIOD)


def new_enrolment(account: str, service: str) -> Enrolment:
    """A fresh secret for ``account`` at ``service`` (the names the app shows)."""
    import pyotp

    return enrolment_of(pyotp.random_base32(32), account, service)


def enrolment_of(secret: str, account: str, service: str) -> Enrolment:
    """The enrolment of a secret already stored (shown again while it waits for a code)."""
    uri = _totp(secret).provisioning_uri(name=account, issuer_name=service)
    return Enrolment(secret, uri)


def normalise_code(value: str) -> str | None:
    """The six digits of a typed code (spaces allowed), or None when it is not one."""
    digits = "".join(value.split())
    return digits if len(digits) == DIGITS and digits.isascii() and digits.isdigit() else None


def matching_step(secret: str, code: str, now: int, after: int) -> int | None:
    """The time step within the window whose code is ``code``, later than step ``after`` (the
    last one accepted), or None: a wrong code, or one already used."""
    totp = _totp(secret)
    current = totp.timecode(now)
    found = None
    for step in range(current - WINDOW, current + WINDOW + 1):
        # every step is compared, in constant time: how many match says nothing by its timing
        if same_secret(totp.generate_otp(step), code) and step > after:
            found = step
    return found


def new_recovery_codes() -> list[str]:
    """Fresh recovery codes, written ``xxxx-xxxx-xxxx-xxxx``."""
    codes = []
    for _ in range(RECOVERY_CODES):
        raw = "".join(secrets.choice(_RECOVERY_ALPHABET) for _ in range(_RECOVERY_LENGTH))
        codes.append("-".join(raw[i : i + 4] for i in range(0, _RECOVERY_LENGTH, 4)))
    return codes


def normalise_recovery_code(value: str) -> str | None:
    """A typed recovery code without its dashes and spaces, in lower case; None when it cannot
    be one (a wrong length or a character no code has)."""
    if len(value) > _RECOVERY_INPUT:
        return None
    raw = "".join(ch for ch in value.lower() if ch not in "- ")
    if len(raw) != _RECOVERY_LENGTH or any(ch not in _RECOVERY_ALPHABET for ch in raw):
        return None
    return raw


def recovery_digest(user_id: str, code: str) -> str:
    """How a recovery code is stored: the SHA-256 of the user id and the normalised code, so
    one account's code is no other's."""
    raw = normalise_recovery_code(code) or code
    return hashlib.sha256(f"mcpauth recovery\x00{user_id}\x00{raw}".encode()).hexdigest()
