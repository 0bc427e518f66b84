"""Who may sign in through an upstream provider, and what of their ID token is kept: the
provider's policy (allowed email domains, which need ``email_verified``; required claim values)
decides before any account exists; the email, its verification and the name are taken as the
token says them, bounded to their columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcpauth.server.config import UpstreamProvider
from mcpauth.server.storage.identities import Claims

MAX_EMAIL = 320
MAX_NAME = 200


@dataclass
class Refused(Exception):
    """Policy refuses this person: ``reason`` for logs, ``message`` for them, in plain words."""

    reason: str
    message: str

    def __str__(self) -> str:
        return self.reason


def _text(value: object, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    cleaned = "".join(ch for ch in value if ch.isprintable()).strip()
    return cleaned[:limit] or None


def _email(value: object) -> str | None:
    if not isinstance(value, str) or len(value) > MAX_EMAIL or value.count("@") != 1:
        return None
    local, domain = value.split("@")
    if not local or not domain or not value.isprintable() or " " in value:
        return None
    return value


def _verified(value: object) -> bool:
    # a few providers send the string "true" (OpenID Connect Core §5.1 says a boolean)
    return value is True or value == "true"


def _has(value: object, accepted: tuple[str, ...]) -> bool:
    if isinstance(value, str):
        return value in accepted
    if isinstance(value, list):
        return any(isinstance(item, str) and item in accepted for item in value)
    return False


def admit(provider: UpstreamProvider, claims: dict[str, Any]) -> Claims:
    """What to keep of a validated ID token's ``claims``, if the provider's policy lets this
    person in.

    Raises:
        Refused: no email, an unverified one or another domain where domains are required; a
            required claim missing or without an accepted value.
    """
    email = _email(claims.get("email"))
    verified = _verified(claims.get("email_verified"))
    if provider.allowed_email_domains:
        if email is None:
            raise Refused(
                "no_email",
                f"{provider.name} did not share your email address, which this service needs "
                "to know whether you may sign in.",
            )
        if not verified:
            raise Refused(
                "email_unverified",
                f"Your email address at {provider.name} is not verified. Verify it there, "
                "then sign in again.",
            )
        domain = email.rsplit("@", 1)[1].lower()
        if domain not in provider.allowed_email_domains:
            raise Refused(
                "email_domain",
                f"Accounts with an address at {domain} can't sign in to this service. "
                "Sign in with your organisation's account instead.",
            )
    for claim, accepted in provider.required_claims.items():
        if not _has(claims.get(claim), accepted):
            raise Refused(
                f"claim_{claim}"[:40],
                f"Your account at {provider.name} doesn't have the access this service "
                "requires. Ask your administrator for it.",
            )
    return Claims(
        issuer=str(claims["iss"]),
        subject=str(claims["sub"]),
        email=email,
        email_verified=verified if email is not None else False,
        name=_text(claims.get("name"), MAX_NAME),
    )
