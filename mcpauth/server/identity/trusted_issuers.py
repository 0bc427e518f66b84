"""Trusted issuers of assertions (ID-JAG identity providers, workload platforms): which issuer
names which key source, and checking an assertion with its keys. The keys come from the server's
one key-set cache (:mod:`.key_sets`): :meth:`IdentityProviders.load` on the event loop before the
request's database work, :meth:`IdentityProviders.verify` in the worker thread from memory."""

from __future__ import annotations

from typing import Any

from mcpauth import jwt
from mcpauth.errors import InvalidGrant, OAuthError, TemporarilyUnavailable
from mcpauth.server.identity.key_sets import UNAVAILABLE, KeySets


class IdentityProviders:
    def __init__(self, configured: dict[str, str], key_sets: KeySets) -> None:
        self._configured = dict(configured)
        self._key_sets = key_sets

    def is_trusted(self, issuer: str) -> bool:
        return issuer in self._configured

    async def load(self, issuer: str, *, kid: str | None, requester: str) -> None:
        """Have ``issuer``'s keys in memory for :meth:`verify` (fetched now if they are
        missing, stale, or lack ``kid``); nothing for an issuer that is not trusted (then
        :meth:`verify` refuses the assertion). On the event loop.

        Raises:
            TemporarilyUnavailable: the keys cannot be loaded now.
        """
        source = self._configured.get(issuer)
        if source is not None:
            await self._key_sets.load(source, kid=kid, requester=requester)

    def keys(self, issuer: str) -> dict[str, jwt.VerificationKey]:
        """The issuer's keys as last loaded, from memory.

        Raises:
            InvalidGrant: the issuer is not trusted.
            TemporarilyUnavailable: its keys were never loaded.
        """
        source = self._configured.get(issuer)
        if source is None:
            raise InvalidGrant("The assertion's issuer is not a trusted identity provider")
        keys = self._key_sets.loaded(source)
        if keys is None:
            raise TemporarilyUnavailable(UNAVAILABLE, headers={"Retry-After": "1"})
        return keys

    def verify(
        self,
        assertion: str,
        issuer: str,
        *,
        typ: tuple[str, ...] | None,
        required: tuple[str, ...],
        what: str,
    ) -> dict[str, Any]:
        """The claims of ``assertion`` signed by ``issuer``'s keys as :meth:`load` left them
        (it refetched them for an unknown ``kid`` if it could); ``aud`` is left to the caller.
        ``what`` names the assertion in the errors.

        Raises:
            InvalidGrant: an unknown key, or any other check failed.
            TemporarilyUnavailable: the issuer's keys were never loaded.
        """
        keys = self.keys(issuer)
        try:
            return jwt.verify(
                assertion, keys, issuer=issuer, audience=None, typ=typ, required=required
            )
        except jwt.UnknownKeyError:
            raise InvalidGrant(f"{what} is signed with an unknown key") from None
        except OAuthError as exc:
            raise InvalidGrant(f"{what} is invalid: {exc.description}") from exc
