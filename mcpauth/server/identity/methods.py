"""How a person signed in, as RFC 8176 authentication method reference values: what a
browser session, a grant and the tokens issued from it carry as ``amr`` (space-separated in
the database, a JSON array in tokens).

- ``pwd``: the account's password.
- ``otp``: a one-time code: a TOTP code (RFC 6238) or one of the account's recovery codes.
- ``hwk`` and ``user``: a passkey (a key the authenticator holds, used with the person
  present); with user verification (a PIN or biometric on the authenticator) it is two factors
  on its own, so ``mfa`` too.
- ``mfa``: two factors, of different kinds: a password or an upstream provider's sign-in and
  then a code or a passkey; or a passkey with user verification.

A sign-in through an upstream provider or an application's own sign-in step has no value of
its own here (the provider's methods are its own); a second factor after it adds its value and
``mfa``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcpauth.server.config import Settings
    from mcpauth.server.storage.models import Resource

PASSWORD = "pwd"
ONE_TIME_CODE = "otp"
HARDWARE_KEY = "hwk"
USER_PRESENCE = "user"
MULTIPLE_FACTORS = "mfa"


def joined(*groups: Iterable[str]) -> str:
    """The methods of ``groups``, each once, in order, as stored."""
    seen: list[str] = []
    for group in groups:
        seen.extend(method for method in group if method not in seen)
    return " ".join(seen)


def passkey(user_verified: bool) -> list[str]:
    """The methods of a passkey sign-in."""
    return [HARDWARE_KEY, USER_PRESENCE, *([MULTIPLE_FACTORS] if user_verified else [])]


def with_second_factor(first: str, second: Iterable[str]) -> str:
    """The methods of a sign-in that added the factor ``second`` to ``first``."""
    return joined(first.split(), second, [MULTIPLE_FACTORS])


def has_two_factors(amr: str) -> bool:
    return MULTIPLE_FACTORS in amr.split()


def required(settings: Settings, resource: Resource | None) -> bool:
    """Whether a person's token for ``resource`` needs a sign-in with two factors (``mfa``):
    the resource was registered with ``--require-mfa``, or the server's ``require_mfa`` asks it
    of every resource (docs/security.md T49). The one rule the browser's step up, token
    exchange, the ID-JAG grant and refreshes all apply."""
    return settings.require_mfa or (resource is not None and resource.require_mfa)


def as_claim(amr: str) -> list[str] | None:
    """The ``amr`` claim of a token (OpenID Connect Core §2, RFC 9068 §2.2.1); None when the
    sign-in named no method."""
    return amr.split() or None


def from_claim(claim: object) -> str:
    """The methods an ``amr`` claim names (a JSON array of strings), as stored: none when the
    claim is absent or is not such an array, and no value that could not be stored (a space in
    it, or empty)."""
    if not isinstance(claim, list):
        return ""
    return joined(
        value for value in claim if isinstance(value, str) and value and value.split() == [value]
    )
