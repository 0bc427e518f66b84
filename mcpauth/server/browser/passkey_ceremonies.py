"""The passkey ceremonies as the pages run them: the options a page carries, and the check of
what the browser posts back.

A challenge is made when the page is rendered, without a write: 16 random bytes, the time,
and an HMAC over them, the browser session id and the form's purpose (the cookie key). What
comes back is accepted only with a challenge this server made for this session and this form
in the last :data:`CHALLENGE_TTL` seconds, and only once: its use is recorded with the
single-use ``jti``s (``storage.defences.record_jti``) in the transaction that records the
passkey's use (docs/security.md T48)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import struct
from dataclasses import dataclass

from mcpauth.oauth import same_secret
from mcpauth.server.browser.services import BrowserServices
from mcpauth.server.identity import passkeys
from mcpauth.server.identity.passkeys import PasskeyRefused, RelyingParty
from mcpauth.server.storage import defences
from mcpauth.server.storage import passkeys as stored
from mcpauth.server.storage.database import Session
from mcpauth.server.storage.models import Passkey

log = logging.getLogger("mcpauth.passkeys")
CHALLENGE_TTL = 300  # seconds between the page and the post
_NONCE, _TIME, _MAC = 16, 8, 16


def relying_party(ctx: BrowserServices) -> RelyingParty | None:
    """This server as a relying party; None when passkeys cannot work (an IP-address issuer)."""
    return RelyingParty.of(ctx.settings.issuer, ctx.settings.service_name)


def _mac(ctx: BrowserServices, sid: str, purpose: str, body: bytes) -> bytes:
    message = b"mcpauth webauthn\x00" + f"{sid}\x00{purpose}\x00".encode() + body
    return hmac.new(ctx.cookie_secret, message, hashlib.sha256).digest()[:_MAC]


def new_challenge(ctx: BrowserServices, sid: str, purpose: str) -> bytes:
    body = secrets.token_bytes(_NONCE) + struct.pack(">Q", ctx.now())
    return body + _mac(ctx, sid, purpose, body)


def _issued_here(ctx: BrowserServices, sid: str, purpose: str, challenge: bytes) -> bool:
    """Whether this server made ``challenge`` for this session and form, and recently."""
    if len(challenge) != _NONCE + _TIME + _MAC:
        return False
    body, mac = challenge[: _NONCE + _TIME], challenge[_NONCE + _TIME :]
    if not same_secret(_mac(ctx, sid, purpose, body).hex(), mac.hex()):
        return False
    made: int = struct.unpack(">Q", body[_NONCE:])[0]
    return made <= ctx.now() <= made + CHALLENGE_TTL


def _spend(ctx: BrowserServices, session: Session, challenge: bytes) -> bool:
    """Record the challenge's one use; False when it was used before."""
    made: int = struct.unpack(">Q", challenge[_NONCE : _NONCE + _TIME])[0]
    return defences.record_jti(
        session, "mcpauth webauthn", challenge.hex(), made + CHALLENGE_TTL, ctx.now()
    )


@dataclass(frozen=True)
class SignedWith:
    """A verified assertion: whose passkey, and whether the authenticator verified the user."""

    user_id: str
    user_verified: bool


def sign_in_options(
    ctx: BrowserServices, rp: RelyingParty, sid: str, purpose: str, allowed: list[str]
) -> str:
    return passkeys.authentication_options(rp, new_challenge(ctx, sid, purpose), allowed)


def registration_options(
    ctx: BrowserServices,
    rp: RelyingParty,
    sid: str,
    purpose: str,
    *,
    user_id: str,
    user_name: str,
    existing: list[str],
) -> str:
    challenge = new_challenge(ctx, sid, purpose)
    return passkeys.registration_options(
        rp, challenge, user_id=user_id, user_name=user_name, existing=existing
    )


def _checked_challenge(ctx: BrowserServices, sid: str, purpose: str, credential: str) -> bytes:
    challenge = passkeys.client_challenge(credential)
    if not _issued_here(ctx, sid, purpose, challenge):
        raise PasskeyRefused("the challenge is not one this session was given, or is too old")
    return challenge


def check_assertion(
    ctx: BrowserServices,
    rp: RelyingParty,
    sid: str,
    purpose: str,
    credential: str,
    user_id: str | None = None,
) -> SignedWith:
    """Verify a posted assertion and record its use (the challenge spent, the counter moved);
    ``user_id``: only that account's passkeys are accepted (a second factor).

    Raises:
        PasskeyRefused: it does not verify, names no passkey here (of ``user_id``), or is a
            replay.
    """
    claimed = passkeys.assertion(credential)
    challenge = _checked_challenge(ctx, sid, purpose, credential)
    with ctx.db.read() as session:
        passkey = stored.get(session, claimed.credential_id)
    if passkey is None or (user_id is not None and passkey.user_id != user_id):
        raise PasskeyRefused("no such passkey")
    if claimed.user_handle is not None and claimed.user_handle != passkey.user_id:
        raise PasskeyRefused("the user handle is not the passkey's account")
    verified = passkeys.verify_assertion(
        rp, credential, challenge, passkey.public_key, passkey.sign_count
    )
    with ctx.db.write() as session:
        if not _spend(ctx, session, challenge):
            raise PasskeyRefused("the challenge was used before")
        # the counter checked against is still the stored one: no other use came in between
        if not stored.record_use(
            session, passkey.credential_id, passkey.sign_count, verified.sign_count, ctx.now()
        ):
            raise PasskeyRefused("the passkey was used by another request at the same time")
    return SignedWith(passkey.user_id, verified.user_verified)


def register(
    ctx: BrowserServices,
    rp: RelyingParty,
    sid: str,
    purpose: str,
    credential: str,
    user_id: str,
    name: str,
) -> Passkey:
    """Verify a posted new credential and store it as ``user_id``'s passkey.

    Raises:
        PasskeyRefused: it does not verify, is a replay, is already registered, or the
            account has as many passkeys as it may.
    """
    challenge = _checked_challenge(ctx, sid, purpose, credential)
    made = passkeys.verify_registration(rp, credential, challenge)
    now = ctx.now()
    with ctx.db.write() as session:
        if not _spend(ctx, session, challenge):
            raise PasskeyRefused("the challenge was used before")
        if stored.get(session, made.credential_id) is not None:
            raise PasskeyRefused("this passkey is already registered")
        if stored.count(session, user_id) >= stored.MAX_PER_ACCOUNT:
            raise PasskeyRefused("the account has as many passkeys as it may")
        passkey = Passkey(
            credential_id=made.credential_id,
            user_id=user_id,
            public_key=made.public_key,
            sign_count=made.sign_count,
            name=name,
            created_at=now,
        )
        stored.add(session, passkey)
    return passkey
