"""A WebAuthn authenticator in Python for the in-process tests: it answers the options a page
carries the way a browser and a platform authenticator would (a P-256 key, "none" attestation,
a signature counter), and can be told to answer wrongly (another origin, another RP ID, a
counter that does not grow) to see the server refuse it."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from base64 import urlsafe_b64decode, urlsafe_b64encode
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

UP, UV, AT = 0x01, 0x04, 0x40


def b64(data: bytes) -> str:
    return urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class SoftAuthenticator:
    origin: str
    user_verified: bool = True
    counter: int = 0  # what it reports: incremented before each assertion when counting
    counting: bool = True
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    credential_id: bytes = field(default_factory=lambda: os.urandom(16))
    user_handle: bytes | None = None

    def _flags(self, *extra: int) -> int:
        return UP | (UV if self.user_verified else 0) | sum(extra)

    def _cose_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps(
            {
                1: 2,
                3: -7,
                -1: 1,
                -2: numbers.x.to_bytes(32, "big"),
                -3: numbers.y.to_bytes(32, "big"),
            }
        )

    def _client_data(self, kind: str, challenge: str, origin: str | None) -> bytes:
        document = {
            "type": kind,
            "challenge": challenge,
            "origin": origin or self.origin,
            "crossOrigin": False,
        }
        return json.dumps(document).encode()

    def create(self, options: str, *, origin: str | None = None, rp_id: str | None = None) -> str:
        """The JSON a browser posts after ``navigator.credentials.create(options)``."""
        parsed = json.loads(options)
        self.user_handle = unb64(parsed["user"]["id"])
        rp_hash = hashlib.sha256((rp_id or parsed["rp"]["id"]).encode()).digest()
        attested = (
            bytes(16) + struct.pack(">H", len(self.credential_id)) + self.credential_id
        ) + self._cose_key()
        auth_data = rp_hash + bytes([self._flags(AT)]) + struct.pack(">I", self.counter) + attested
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        client_data = self._client_data("webauthn.create", parsed["challenge"], origin)
        return json.dumps(
            {
                "id": b64(self.credential_id),
                "rawId": b64(self.credential_id),
                "type": "public-key",
                "response": {
                    "clientDataJSON": b64(client_data),
                    "attestationObject": b64(attestation),
                    "transports": ["internal"],
                },
                "clientExtensionResults": {},
                "authenticatorAttachment": "platform",
            }
        )

    def get(
        self,
        options: str,
        *,
        origin: str | None = None,
        rp_id: str | None = None,
        counter: int | None = None,
    ) -> str:
        """The JSON a browser posts after ``navigator.credentials.get(options)``."""
        parsed = json.loads(options)
        if counter is not None:
            self.counter = counter
        elif self.counting:
            self.counter += 1
        rp_hash = hashlib.sha256((rp_id or parsed["rpId"]).encode()).digest()
        auth_data = rp_hash + bytes([self._flags()]) + struct.pack(">I", self.counter)
        client_data = self._client_data("webauthn.get", parsed["challenge"], origin)
        signed = auth_data + hashlib.sha256(client_data).digest()
        signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return json.dumps(
            {
                "id": b64(self.credential_id),
                "rawId": b64(self.credential_id),
                "type": "public-key",
                "response": {
                    "clientDataJSON": b64(client_data),
                    "authenticatorData": b64(auth_data),
                    "signature": b64(signature),
                    "userHandle": b64(self.user_handle) if self.user_handle else None,
                },
                "clientExtensionResults": {},
                "authenticatorAttachment": "platform",
            }
        )


def page_options(html_text: str, kind: str) -> str:
    """The options of the page's form marked ``data-passkey="<kind>"``."""
    import html
    import re

    found = re.search(rf'data-passkey="{kind}" data-options="([^"]*)"', html_text)
    assert found is not None, f"no {kind} passkey form on the page"
    return html.unescape(found.group(1))


def page_form(html_text: str, kind: str) -> dict[str, Any]:
    """The action and hidden fields of the ``data-passkey="<kind>"`` form."""
    import html
    import re

    start = html_text.index(f'data-passkey="{kind}"')
    form_start = html_text.rindex("<form", 0, start)
    form_end = html_text.index("</form>", start)
    form = html_text[form_start:form_end]
    action = re.search(r'action="([^"]*)"', form)
    assert action is not None
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))
    return {"action": html.unescape(action.group(1)), "fields": fields}
