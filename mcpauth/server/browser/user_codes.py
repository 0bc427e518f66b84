"""User codes of the device authorization grant (RFC 8628 §6.1): what a person reads on a
device and types on the verification page.

Eight characters from twenty consonants (no vowels, so no words; no look-alikes of digits),
shown as ``BCDF-GHJK``: 20^8 ≈ 2^34.6 codes, the RFC's own example. A typed code is read
leniently (case, dashes, spaces and other separators ignored). The entropy alone does not
resist guessing online; the verification page's throttles do (docs/security.md T45). A code
is stored only as an HMAC under a key derived from the server secret: a plain digest of so few
bits would be reversed by trying them all."""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets

# RFC 8628 §6.1: case-insensitive base-20 consonants
ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
LENGTH = 8
GROUP = 4
ENTROPY_BITS = LENGTH * math.log2(len(ALPHABET))
MAX_TYPED_LENGTH = 64  # a typed code longer than this is no code (nothing is normalised)
_SEPARATORS = re.compile(r"[\s\-_.\u00b7\u2010-\u2015]+")  # spaces, dashes, dots


def new_user_code() -> str:
    """A fresh user code, its characters drawn uniformly with :mod:`secrets`."""
    return "".join(secrets.choice(ALPHABET) for _ in range(LENGTH))


def display(code: str) -> str:
    """The code as people are shown it: two groups of four, ``BCDF-GHJK``."""
    return "-".join(code[i : i + GROUP] for i in range(0, len(code), GROUP))


def normalise(typed: str) -> str | None:
    """The user code a person typed, or None when it cannot be one (a wrong length or a
    character outside the alphabet): upper case, separators dropped."""
    if len(typed) > MAX_TYPED_LENGTH:
        return None
    code = _SEPARATORS.sub("", typed)
    if not code.isascii():  # upper() would turn some letters into others ("ß" into "SS")
        return None
    code = code.upper()
    if len(code) != LENGTH or any(c not in ALPHABET for c in code):
        return None
    return code


def user_code_digest(secret: bytes, code: str) -> str:
    """The keyed digest under which a (normalised) user code is stored and looked up."""
    return hmac.new(secret, f"user-code:{code}".encode(), hashlib.sha256).hexdigest()
