"""Cross-site request forgery defence for the browser forms (sign-in, consent, account,
sign-out), following OWASP's CSRF cheat sheet:

1. A synchroniser token: an HMAC over the browser session id and the form's purpose (which
   names the pending authorization request), so a token is good for one form of one session
   (RFC 9700 §4.7).
2. Fetch metadata and ``Origin`` where the browser sends them. The interaction pages are served
   with ``Referrer-Policy: same-origin``; under that policy every current browser sends the real
   ``Origin`` on a same-origin form POST (the Fetch standard's "serializing a request origin").
   ``Origin: null`` (sent under ``no-referrer``, from sandboxed frames or privacy extensions) is
   believed only together with ``Sec-Fetch-Site: same-origin``, which a page cannot forge.
   A request with neither header (an old browser, a script) rests on the token alone.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping

from mcpauth.oauth import same_secret

log = logging.getLogger("mcpauth.csrf")

SAME_ORIGIN = "same-origin"


def cross_site_reason(headers: Mapping[str, str], own_origin: str) -> str | None:
    """Why a form POST with these headers is refused as cross-site, or None to accept it.

    ``own_origin`` is the issuer's origin (``scheme://host[:port]``), the only origin whose
    pages carry the forms.
    """
    site = headers.get("sec-fetch-site")
    sent = headers.get("origin")
    if site is not None and site != SAME_ORIGIN:
        return f"Sec-Fetch-Site is {site!r}"
    if sent is None or sent == own_origin:
        return None
    if sent == "null":
        return None if site == SAME_ORIGIN else "Origin is null without Sec-Fetch-Site"
    return "Origin is another site"


def refuse_logged(reason: str, path: str) -> None:
    """Record a refused form (the reason, never the form's values)."""
    log.warning("cross-site form refused: %s (path %s)", reason, path)


def csrf_token(secret: bytes, sid: str, purpose: str) -> str:
    """The synchroniser token for one form (``purpose``) of one browser session (``sid``)."""
    return hmac.new(secret, f"{sid}:{purpose}".encode(), hashlib.sha256).hexdigest()


def csrf_valid(secret: bytes, sid: str, purpose: str, token: object) -> bool:
    """Whether ``token`` (a form's field as posted: a string, a file, missing) is the one
    :func:`csrf_token` made for this session and form."""
    if not isinstance(token, str) or not token:
        return False
    return same_secret(csrf_token(secret, sid, purpose), token)
