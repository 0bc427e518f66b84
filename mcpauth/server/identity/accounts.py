"""Who may sign in through an upstream provider, and what of their ID token is kept: the
provider's policy (allowed email domains, which need ``email_verified``; required claim values)
decides before any account exists; the email, its verification, the name and the groups are
taken as the token says them, bounded to their columns: at most ``MAX_GROUPS`` group names of
at most ``MAX_GROUP`` printable characters, together at most ``MAX_GROUPS_BYTES`` in a token
(the first ones in the provider's order; a longer list is cut there, and a name that is not such
a string is left out, each with a warning that names the provider and the counts, never a
group)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from mcpauth.server.config import UpstreamProvider
from mcpauth.server.storage.identities import Claims

log = logging.getLogger("mcpauth.upstream")

MAX_EMAIL = 320
MAX_NAME = 200
MAX_GROUPS = 100
MAX_GROUP = 255
MAX_GROUPS_BYTES = 4096  # of a token: a header of 8 KiB or more is refused by many servers


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


def _groups(provider: UpstreamProvider, value: object) -> tuple[str, ...]:
    """The group names of a ``groups`` claim: a list of strings or one string (none for
    GitHub, whose user API has no groups)."""
    if provider.kind == "github" or value is None:
        return ()
    listed = [value] if isinstance(value, str) else value if isinstance(value, list) else None
    if listed is None:
        log.warning("upstream %s: the groups claim is not a list of strings", provider.id)
        return ()
    names = [
        item
        for item in listed
        if isinstance(item, str) and 0 < len(item) <= MAX_GROUP and item.isprintable()
    ]
    if len(names) < len(listed):
        log.warning(
            "upstream %s: %d of %d groups left out (not strings of 1 to %d printable characters)",
            provider.id,
            len(listed) - len(names),
            len(listed),
            MAX_GROUP,
        )
    unique = list(dict.fromkeys(names))
    kept: list[str] = []
    size = 0
    for name in unique[:MAX_GROUPS]:
        size += len(name.encode()) + 3  # as a JSON string in a token, with its comma
        if size > MAX_GROUPS_BYTES:
            break
        kept.append(name)
    if len(kept) < len(unique):
        log.warning(
            "upstream %s: %d groups sent, the first %d kept (at most %d, %d bytes)",
            provider.id,
            len(unique),
            len(kept),
            MAX_GROUPS,
            MAX_GROUPS_BYTES,
        )
    return tuple(kept)


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
        groups=_groups(provider, claims.get("groups")),
    )
