"""Passkeys: the WebAuthn ceremonies (W3C Web Authentication Level 2) with the ``webauthn``
package, the only module that imports it. The relying party is the issuer: its host is the
RP ID and its origin the only origin accepted (§7.1 step 9, §7.2 step 13), so an assertion
made for another site, or on another site for this one, is refused. A passkey is discoverable
(a resident key: sign-in without a name), user verification is preferred and recorded.
The challenge is the caller's (bound to the browser session and single use, see
``browser/passkey_ceremonies.py``); the signature counter must grow when either side of the
comparison is not zero (§6.1.1)."""

from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from webauthn.helpers.structs import PublicKeyCredentialDescriptor

TIMEOUT_MS = 120_000  # what the browser gives the person to use the authenticator
MAX_CREDENTIAL_JSON = 16 * 1024  # a posted credential longer than this is refused unread
MAX_CREDENTIAL_ID = 1023  # bytes (§6.5.1: credentialIdLength); base64url: 1364 characters


def base64url_to_bytes(text: str) -> bytes:
    """WebAuthn's base64url, without padding (§3: Base64url Encoding).

    Raises:
        ValueError: not base64url.
    """
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError("not base64url") from exc


_BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def is_base64url(text: str) -> bool:
    """Whether ``text`` is made only of base64url's alphabet (no padding)."""
    return _BASE64URL.issuperset(text)


def bytes_to_base64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@functools.cache
def _errors() -> tuple[type[Exception], ...]:
    """What the package raises on input it cannot verify or read (it is imported by the first
    ceremony: the package and its attestation formats take a third of a second to load)."""
    from webauthn.helpers.exceptions import WebAuthnException

    return (WebAuthnException, ValueError, TypeError, KeyError, AttributeError)


class PasskeyRefused(Exception):
    """A credential or assertion that does not verify; the message says why (for the log)."""


@dataclass(frozen=True)
class RelyingParty:
    """This server as a WebAuthn relying party."""

    id: str  # the issuer's host, without a port
    name: str
    origin: str  # scheme://host[:port] of the issuer

    @classmethod
    def of(cls, issuer: str, name: str) -> RelyingParty | None:
        """The relying party of ``issuer``; None when its host is an IP address, which no
        browser accepts as an RP ID (passkeys then stay off)."""
        parts = urlsplit(issuer)
        host = parts.hostname or ""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return cls(host, name, f"{parts.scheme}://{parts.netloc}") if host else None
        return None


@dataclass(frozen=True)
class NewPasskey:
    credential_id: str  # base64url
    public_key: str  # COSE, base64url
    sign_count: int
    user_verified: bool


@dataclass(frozen=True)
class Assertion:
    credential_id: str
    user_handle: str | None  # the account id the authenticator returned, if any
    client_challenge: bytes  # the challenge the browser signed over (checked by the caller)


@dataclass(frozen=True)
class Verified:
    sign_count: int
    user_verified: bool


def _descriptors(credential_ids: list[str]) -> list[PublicKeyCredentialDescriptor]:
    from webauthn.helpers.structs import PublicKeyCredentialDescriptor

    return [PublicKeyCredentialDescriptor(id=base64url_to_bytes(i)) for i in credential_ids]


def registration_options(
    rp: RelyingParty,
    challenge: bytes,
    *,
    user_id: str,
    user_name: str,
    existing: list[str],
) -> str:
    """The JSON options of ``navigator.credentials.create()``: a discoverable credential for
    the account (its opaque id as the user handle), none the account already has."""
    from webauthn import generate_registration_options, options_to_json
    from webauthn.helpers.structs import (
        AttestationConveyancePreference,
        AuthenticatorSelectionCriteria,
        ResidentKeyRequirement,
        UserVerificationRequirement,
    )

    options = generate_registration_options(
        rp_id=rp.id,
        rp_name=rp.name,
        user_id=user_id.encode(),
        user_name=user_name,
        user_display_name=user_name,
        challenge=challenge,
        timeout=TIMEOUT_MS,
        attestation=AttestationConveyancePreference.NONE,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.PREFERRED,
        ),
        exclude_credentials=_descriptors(existing),
    )
    return str(options_to_json(options))


def authentication_options(rp: RelyingParty, challenge: bytes, allowed: list[str]) -> str:
    """The JSON options of ``navigator.credentials.get()``: any discoverable credential of
    this RP when ``allowed`` is empty (sign-in without a name), else those credentials."""
    from webauthn import generate_authentication_options, options_to_json
    from webauthn.helpers.structs import UserVerificationRequirement

    options = generate_authentication_options(
        rp_id=rp.id,
        challenge=challenge,
        timeout=TIMEOUT_MS,
        allow_credentials=_descriptors(allowed),
        user_verification=UserVerificationRequirement.PREFERRED,
    )
    return str(options_to_json(options))


def _document(credential: str) -> dict[str, Any]:
    if len(credential) > MAX_CREDENTIAL_JSON:
        raise PasskeyRefused("the credential is too large")
    try:
        document = json.loads(credential)
    except (ValueError, RecursionError) as exc:  # nesting deeper than the parser's stack
        raise PasskeyRefused("the credential is not JSON") from exc
    if not isinstance(document, dict) or not isinstance(document.get("response"), dict):
        raise PasskeyRefused("the credential is not a public-key credential")
    return document


def client_challenge(credential: str) -> bytes:
    """The challenge in a posted credential's client data, unverified: the caller checks it is
    one it issued before anything else is done.

    Raises:
        PasskeyRefused: no readable client data.
    """
    from webauthn.helpers import parse_client_data_json

    document = _document(credential)
    try:
        data = base64url_to_bytes(str(document["response"]["clientDataJSON"]))
        return bytes(parse_client_data_json(data).challenge)
    except _errors() as exc:
        raise PasskeyRefused("the client data is malformed") from exc


def verify_registration(rp: RelyingParty, credential: str, challenge: bytes) -> NewPasskey:
    """The new passkey of a ``navigator.credentials.create()`` answer made for ``challenge``
    on this RP's origin.

    Raises:
        PasskeyRefused: it does not verify.
    """
    from webauthn import verify_registration_response

    document = _document(credential)
    try:
        verified = verify_registration_response(
            credential=document,
            expected_challenge=challenge,
            expected_rp_id=rp.id,
            expected_origin=rp.origin,
        )
    except _errors() as exc:
        raise PasskeyRefused(str(exc) or type(exc).__name__) from exc
    if len(verified.credential_id) > MAX_CREDENTIAL_ID:
        raise PasskeyRefused("the credential id is longer than WebAuthn allows")
    return NewPasskey(
        bytes_to_base64url(verified.credential_id),
        bytes_to_base64url(verified.credential_public_key),
        verified.sign_count,
        verified.user_verified,
    )


def assertion(credential: str) -> Assertion:
    """Who a ``navigator.credentials.get()`` answer says it is, unverified.

    Raises:
        PasskeyRefused: it is not an assertion.
    """
    document = _document(credential)
    raw_id, handle = document.get("rawId"), document["response"].get("userHandle")
    if not isinstance(raw_id, str) or not raw_id or document.get("id") != raw_id:
        raise PasskeyRefused("the credential has no id")
    if len(raw_id) > MAX_CREDENTIAL_ID * 4 // 3 + 1:
        raise PasskeyRefused("the credential id is longer than WebAuthn allows")
    if not is_base64url(raw_id):  # looked up in the database: base64url characters only
        raise PasskeyRefused("the credential id is not base64url")
    try:
        user = base64url_to_bytes(handle).decode() if isinstance(handle, str) and handle else None
    except _errors() as exc:
        raise PasskeyRefused("the user handle is malformed") from exc
    return Assertion(raw_id, user, client_challenge(credential))


def verify_assertion(
    rp: RelyingParty, credential: str, challenge: bytes, public_key: str, sign_count: int
) -> Verified:
    """Check an assertion against the stored passkey: the challenge, the origin, the RP ID's
    hash, the user's presence, the signature, and a counter above ``sign_count`` unless both
    are zero (an authenticator that keeps no counter).

    Raises:
        PasskeyRefused: it does not verify.
    """
    from webauthn import verify_authentication_response

    document = _document(credential)
    try:
        verified = verify_authentication_response(
            credential=document,
            expected_challenge=challenge,
            expected_rp_id=rp.id,
            expected_origin=rp.origin,
            credential_public_key=base64url_to_bytes(public_key),
            credential_current_sign_count=sign_count,
        )
    except _errors() as exc:
        raise PasskeyRefused(str(exc) or type(exc).__name__) from exc
    return Verified(verified.new_sign_count, verified.user_verified)
