"""Size limits on what clients send, in one place. Each bounds memory and storage per request
and keeps values that are echoed back (``state``, error descriptions) small."""

from __future__ import annotations

# OAuth 2.1 §4.1.1: ``state`` is echoed in the redirect; longer ones are refused on a page
MAX_STATE_LENGTH = 1024
# RFC 7591 §3.1 / RFC 7592 §2.2 request bodies: room for 20 redirect URIs and a JWKS of
# several RSA keys, far less than the general form-body limit
MAX_REGISTRATION_BYTES = 16 * 1024
