"""Size limits on what clients send, in one place. Each bounds memory and storage per request
and keeps values that are echoed back (``state``, error descriptions) small. Every string a
request can put in a column is checked against one of these before anything is written, and
each fits its column (``tests/server/test_stored_sizes.py`` keeps the two in step)."""

from __future__ import annotations

import hashlib
import ipaddress

# OAuth 2.1 §4.1.1: ``state`` is echoed in the redirect; longer ones are refused on a page
MAX_STATE_LENGTH = 1024
# OpenID Connect Core §3.1.2.1: ``nonce`` is kept with the code and echoed in the ID token
MAX_NONCE_LENGTH = 255
# RFC 7591 §3.1 / RFC 7592 §2.2 request bodies: room for 20 redirect URIs and a JWKS of
# several RSA keys, far less than the general form-body limit
MAX_REGISTRATION_BYTES = 16 * 1024
# client metadata names and short strings: client_name, software_id, software_version and each
# contacts entry (the clients.client_name column)
MAX_NAME_LENGTH = 200
# URLs a client registers: redirect URIs, client_uri, logo_uri, tos_uri, policy_uri, jwks_uri
# (the columns that hold them take 2048, room for a loopback port)
MAX_URI_LENGTH = 2000
MAX_REDIRECT_URIS = 20
MAX_CONTACTS = 10
# the scope a client registers (RFC 7591 §2); every token must also be a known scope
MAX_SCOPE_LENGTH = 2000
# scopes named in one authorization or token request
MAX_SCOPES = 50
# a client_id that is a metadata document URL (the clients.client_id column)
MAX_CLIENT_ID_URL_LENGTH = 2048
# the sign-in form (users.username; a password only goes to argon2id)
MAX_USERNAME_LENGTH = 200
MAX_PASSWORD_LENGTH = 1024
# an identity provider's subject in an ID-JAG: OpenID Connect Core §2 allows 255 characters
MAX_SUBJECT_LENGTH = 255
# a client address as it goes into throttle and rate-limit keys (throttles.key and
# rate_counters.key hold 300): an IPv6 address with a zone fits; anything longer (an
# X-Forwarded-For value a trusted proxy passed on unchecked) is keyed by its digest
MAX_ADDRESS_LENGTH = 64


def address_in_key(address: str) -> str:
    """``address`` as a throttle or rate-limit key part: an IPv6 address as its /64 network
    (one subscriber's allocation: a host that can pick any of 2^64 addresses is one caller,
    RFC 6177), any other address itself, or its digest when longer than
    :data:`MAX_ADDRESS_LENGTH` (a key never outgrows its column, a long value still counts as
    one address)."""
    if ":" in address:
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            parsed = None
        if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is None:
            return str(ipaddress.IPv6Network((int(parsed) >> 64 << 64, 64)))
    if len(address) <= MAX_ADDRESS_LENGTH:
        return address
    return "sha256:" + hashlib.sha256(address.encode("utf-8", "surrogatepass")).hexdigest()[:32]
