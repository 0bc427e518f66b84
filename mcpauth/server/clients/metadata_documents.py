"""Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document, AS-06..AS-18):
a ``client_id`` that is an https URL names a JSON document that describes the client. It is
fetched with the SSRF-safe client (:mod:`.ssrf`), validated like an RFC 7591 registration plus
the CIMD rules, and returned as an unsaved ``Client(source="cimd")``. Validated documents are
cached per URL within bounds; invalid documents never are (AS-10). Fetch failures are
remembered briefly by the server's fetch gate (:mod:`.fetch_admission`), and are described to
the requester only as "could not be fetched"."""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from mcpauth.caching import ExpiringCache, freshness_lifetime, wall_clock
from mcpauth.errors import InvalidClient, InvalidClientMetadata, InvalidRedirectUri
from mcpauth.oauth import parse_scope
from mcpauth.server.clients.fetch_admission import FetchDeclined
from mcpauth.server.clients.ssrf import FetchedResponse, FetchError, SafeFetcher
from mcpauth.server.clients.validation import (
    ADMIN_GRANTS,
    REGISTRABLE_GRANTS,
    validate_client_metadata,
)
from mcpauth.server.config import Settings
from mcpauth.server.operations.size_limits import MAX_CLIENT_ID_URL_LENGTH
from mcpauth.server.outbound import Outbound, outbound_for
from mcpauth.server.storage.models import Client

Fetcher = Callable[[str], FetchedResponse]
MAX_DEPTH = 16  # a client metadata document nests 4-5 levels (jwks.keys[].x5c[])
MIN_TTL, DEFAULT_TTL, MAX_TTL = 60, 300, 24 * 3600
_AUTH_METHODS = ("none", "private_key_jwt")
# SEP-3149 (OpenID Connect RP Metadata Choices): the methods a document offers, in a list; the
# second name is accepted too
_AUTH_METHOD_LISTS = ("token_endpoint_auth_methods_supported", "token_endpoint_auth_methods")
# grant types this server knows, allowed or refused with a reason; any other is ignored
_KNOWN_GRANTS = frozenset((*REGISTRABLE_GRANTS, *ADMIN_GRANTS, "implicit", "password"))
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")
_DOT_SEGMENTS = {".", ".."}
NOT_FETCHED = "the client metadata document could not be fetched"
log = logging.getLogger(__name__)


class CIMDError(InvalidClient):
    """The ``client_id`` URL, its document, or fetching it broke a rule; the description says
    which and may be shown to the user. An ``invalid_client`` error: the authorization endpoint
    must not redirect (the redirect URI is unverified), the token endpoint answers 401."""


class UnacceptableClientMetadata(CIMDError):
    """The document was fetched and parsed, but its metadata cannot be accepted here (no
    authentication method in common, an invalid redirect URI...): the client's configuration,
    which the authorization endpoint shows on its page as ``invalid_client_metadata``."""


def is_cimd_client_id(client_id: str) -> bool:
    """True if ``client_id`` is meant as a metadata document URL (locally issued client IDs
    never start with ``https://``, AS-32)."""
    return client_id[:8].lower() == "https://"


def check_client_id_url(client_id: str) -> str:
    """Check the CIMD client identifier URL rules (AS-15) and return it unchanged.

    Raises:
        CIMDError: the URL breaks a rule; the description names it.
    """
    if len(client_id) > MAX_CLIENT_ID_URL_LENGTH:
        raise CIMDError(f"client_id URL is longer than {MAX_CLIENT_ID_URL_LENGTH} characters")
    if _UNSAFE.search(client_id):
        raise CIMDError("client_id URL must not contain spaces, control characters or '\\'")
    parts = urlsplit(client_id)
    # CIMD §3: MUST use https, MUST contain a path, MUST NOT contain dot segments, a fragment,
    # or userinfo; SHOULD NOT contain a query (refused here); MAY contain a port
    if parts.scheme != "https":
        raise CIMDError("client_id URL must use the https scheme")
    if "#" in client_id:
        raise CIMDError("client_id URL must not contain a fragment")
    if "@" in parts.netloc:
        raise CIMDError("client_id URL must not contain a username or password")
    if "?" in client_id:
        raise CIMDError("client_id URL must not contain a query")
    if not parts.hostname:
        raise CIMDError("client_id URL must name a host")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise CIMDError("client_id URL has an invalid port") from exc
    if parts.path in ("", "/"):
        raise CIMDError("client_id URL must contain a path, not just '/'")
    if any(unquote(segment) in _DOT_SEGMENTS for segment in parts.path.split("/")):
        raise CIMDError("client_id URL must not contain '.' or '..' path segments")
    return client_id


def _check_host_policy(settings: Settings, client_id: str) -> None:
    """AS-18: the administrator's deny list wins; ``.example.com`` denies every subdomain."""
    host = (urlsplit(client_id).hostname or "").rstrip(".")
    for entry in (e.strip().lower().strip("[]").rstrip(".") for e in settings.cimd_deny_hosts):
        if entry and (host == entry or (entry.startswith(".") and host.endswith(entry))):
            raise CIMDError(f"client metadata documents from {host} are not accepted here")


def _check_depth(content: bytes) -> None:
    """Refuse deep nesting before ``json.loads`` can recurse on it."""
    depth, in_string, escaped = 0, False, False
    for byte in content:
        if in_string:
            escaped, in_string = (False, True) if escaped else (byte == 0x5C, byte != 0x22)
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > MAX_DEPTH:
                raise CIMDError(f"client metadata document nests deeper than {MAX_DEPTH} levels")
        elif byte in (0x5D, 0x7D):
            depth -= 1


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        raise ValueError("duplicate member names")
    return members


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(response: FetchedResponse) -> dict[str, Any]:
    """AS-12: the document must be a valid JSON object served as JSON."""
    mime = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if mime != "application/json" and not (
        mime.startswith("application/") and mime.endswith("+json")
    ):
        raise CIMDError(
            f"client metadata document must be served as application/json, not {mime or 'untyped'}"
        )
    _check_depth(response.content)
    try:
        document = json.loads(
            response.content, object_pairs_hook=_unique_members, parse_constant=_refuse_constant
        )
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CIMDError(f"client metadata document is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise CIMDError("client metadata document must be a JSON object")
    return document


def _check_required(document: dict[str, Any], client_id: str) -> None:
    # AS-09, CIMD §4.1: the document's client_id equals the URL, by simple string comparison
    # (RFC 3986 §6.2.1)
    declared = document.get("client_id")
    if declared != client_id:
        shown = repr(declared)[:120] if declared is not None else "missing"
        raise CIMDError(f"client metadata document's client_id ({shown}) is not its URL")
    # AS-12: client_name and redirect_uris are required
    name = document.get("client_name")
    if not isinstance(name, str) or not name.strip():
        raise CIMDError("client metadata document must have a non-empty client_name")
    uris = document.get("redirect_uris")
    if not isinstance(uris, list) or not uris:
        raise CIMDError("client metadata document must list its redirect_uris")
    # AS-16, CIMD §4.1: no shared secrets of any kind
    if "client_secret" in document or "client_secret_expires_at" in document:
        raise CIMDError("client metadata document must not contain a client_secret")


def _offered_methods(document: dict[str, Any]) -> tuple[str, list[str]]:
    """Where the document lists its authentication methods, and the list: SEP-3149's list wins
    over the single ``token_endpoint_auth_method`` (kept for servers that know only that);
    neither means ``none`` (no secret can exist: a public client)."""
    for name in _AUTH_METHOD_LISTS:
        if name in document:
            offered = document[name]
            if (
                not isinstance(offered, list)
                or not offered
                or not all(isinstance(m, str) and m for m in offered)
            ):
                raise UnacceptableClientMetadata(
                    f"client metadata document: {name} must be a non-empty array of strings"
                )
            return name, list(dict.fromkeys(offered))
    single = document.get("token_endpoint_auth_method", "none")
    if not isinstance(single, str):
        raise UnacceptableClientMetadata(
            "client metadata document: token_endpoint_auth_method must be a string"
        )
    return "token_endpoint_auth_method", [single]


def negotiate_auth_method(document: dict[str, Any]) -> str:
    """The token endpoint authentication method of a metadata document client: of the methods
    the document offers, ``private_key_jwt`` when it also publishes its keys (the stronger),
    else ``none``.

    Raises:
        UnacceptableClientMetadata: the list is malformed or no offered method is usable here;
            the description names the methods offered and those accepted.
    """
    name, offered = _offered_methods(document)
    has_keys = "jwks" in document or "jwks_uri" in document
    if "private_key_jwt" in offered and (has_keys or offered == ["private_key_jwt"]):
        return "private_key_jwt"  # without keys: refused by validation, naming the cause
    if "none" in offered:
        return "none"
    # AS-16, CIMD §4.1: no shared secrets of any kind
    secret = " (no shared secrets)" if any(m.startswith("client_secret") for m in offered) else ""
    shown = ", ".join(repr(m[:40]) for m in offered[:5])
    what = f"{name} {shown} is not" if len(offered) == 1 else f"{name} [{shown}]: none is"
    raise UnacceptableClientMetadata(
        f"client metadata document: {what} accepted for metadata document clients{secret}; "
        "use 'none' or 'private_key_jwt'"
    )


def _offered_grants(document: dict[str, Any]) -> Any:
    """The document's ``grant_types`` without those this server does not know (a document is
    published once for many servers: VS Code's lists the device grant); those it knows and
    refuses stay, to be refused with their reason."""
    grants = document.get("grant_types")
    if not isinstance(grants, list):
        return grants
    known = [g for g in grants if not isinstance(g, str) or g in _KNOWN_GRANTS]
    return known or grants


def _declared_scopes(document: dict[str, Any]) -> set[str]:
    scope = document.get("scope")
    return set(parse_scope(scope)) if isinstance(scope, str) else set()


def _client_fields(client_id: str, document: dict[str, Any]) -> dict[str, Any]:
    """Validate the document; return the ``Client`` columns to build (cacheable, immutable)."""
    _check_required(document, client_id)
    raw = {k: v for k, v in document.items() if k not in _AUTH_METHOD_LISTS}
    raw["token_endpoint_auth_method"] = negotiate_auth_method(document)
    if "grant_types" in raw:
        raw["grant_types"] = _offered_grants(document)
    try:
        # RFC 7591 rules: redirect URIs (native when all loopback/custom, RFC 8252), grants
        # limited to authorization_code/refresh_token, private_key_jwt needs jwks or jwks_uri
        validated = validate_client_metadata(
            raw, known_scopes=_declared_scopes(document), auth_methods=_AUTH_METHODS
        )
    except (InvalidClientMetadata, InvalidRedirectUri) as exc:
        raise UnacceptableClientMetadata(f"client metadata document: {exc.description}") from exc
    return {
        "client_name": validated.client_name,
        "redirect_uris": validated.redirect_uris,
        "grant_types": validated.grant_types,
        "response_types": validated.response_types,
        # AS-16: private_key_jwt makes the client confidential; the token endpoint requires it
        "token_endpoint_auth_method": validated.token_endpoint_auth_method,
        "application_type": validated.application_type,
        "scope": validated.scope,
        "jwks": validated.jwks,
        "jwks_uri": validated.jwks_uri,
        "client_metadata": {"client_id": client_id, **validated.document()},
    }


def cache_lifetime(headers: Mapping[str, str], now: float) -> int:
    """How long to keep a valid document, in seconds (0: do not keep it).

    ``no-store``/``no-cache``/a zero or past lifetime → 0; no caching headers → 5 minutes;
    otherwise ``s-maxage``, ``max-age`` or ``Expires`` clamped to [60 s, 24 h].
    """
    lifetime = freshness_lifetime(headers, now)
    if lifetime is None:
        return DEFAULT_TTL
    if lifetime <= 0:
        return 0
    return int(min(max(lifetime, MIN_TTL), MAX_TTL))


class MetadataCache(ExpiringCache[str, dict[str, Any]]):
    """Validated documents by URL, each until its HTTP freshness ends (wall-clock expiry),
    least recently used out first, safe across threads."""

    def __init__(self, max_entries: int = 1000) -> None:
        super().__init__(ttl=0, max_entries=max_entries, clock=wall_clock)


def fetcher_for(
    settings: Settings,
    outbound: Outbound | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
) -> SafeFetcher:
    """The SSRF-safe fetcher the CIMD settings describe, on the server's outbound route
    (``outbound``, else the one the settings describe; ``ssl_context`` replaces its trust
    store: tests trust their own CA).

    Raises:
        ConfigurationError: ``outbound_ca_file`` cannot be loaded.
    """
    route = outbound or outbound_for(settings, ssl_context=ssl_context)
    return SafeFetcher(
        allow_hosts=settings.cimd_allow_hosts,
        deny_hosts=settings.cimd_deny_hosts,
        timeout=settings.cimd_timeout,
        max_bytes=settings.cimd_max_bytes,
        ssl_context=route.trust,
        proxy=route.proxy,
    )


def _new_client(client_id: str, fields: dict[str, Any], now: float) -> Client:
    copied = json.loads(json.dumps(fields))  # callers may mutate; the cache must not change
    return Client(client_id=client_id, source="cimd", created_at=int(now), **copied)


def check_before_fetch(settings: Settings, client_id: str) -> None:
    """Every rule a ``client_id`` URL must pass before its document is fetched.

    Raises:
        CIMDError: metadata documents are disabled; the URL breaks a CIMD rule (AS-15) or its
            host is denied (AS-18).
    """
    if not settings.cimd_enabled:
        raise CIMDError("this server does not accept client metadata document URLs")
    check_client_id_url(client_id)
    _check_host_policy(settings, client_id)


def cached_client(client_id: str, cache: MetadataCache | None) -> Client | None:
    """A fresh unsaved client from a validated document still in ``cache``; None if none is."""
    cached = cache.get(client_id) if cache is not None else None
    return None if cached is None else _new_client(client_id, cached, time.time())


def fetch_failed(exc: FetchError | FetchDeclined) -> CIMDError:
    """The error a requester is given for a fetch that failed or was declined."""
    if isinstance(exc, FetchDeclined):
        return CIMDError(exc.message)
    # Not an oracle: the requester learns that the fetch failed, never which address the
    # host resolved to or how the connection ended (the log has that).
    log.warning("client metadata document not fetched: %s", exc.message)
    return CIMDError(NOT_FETCHED)


def client_from_response(
    client_id: str, response: FetchedResponse, cache: MetadataCache | None
) -> Client:
    """The unsaved client the fetched document describes; the document is cached when valid.

    Raises:
        CIMDError: the document is not JSON, its ``client_id`` is not the URL, or its metadata
            is invalid.
    """
    now = time.time()
    fields = _client_fields(client_id, _parse(response))
    # AS-10: only a document that passed every check is cached, for as long as HTTP allows
    lifetime = cache_lifetime(response.headers, now)
    if cache is not None and lifetime > 0:
        cache.put(client_id, fields, expires_at=now + lifetime)
    return _new_client(client_id, fields, now)


def resolve_client_metadata_document(
    settings: Settings,
    client_id: str,
    *,
    fetcher: Fetcher | None = None,
    cache: MetadataCache | None = None,
) -> Client:
    """Resolve a URL ``client_id`` to an unsaved ``Client(source="cimd")``, fetching here.

    Blocking, for the command line and tests: the server never calls it, it fetches on the
    event loop through its fetch gate (``ClientDirectory.load``) with the same checks.
    ``fetcher`` defaults to ``fetcher_for(settings)``. Without ``cache`` every call fetches.

    Raises:
        CIMDError: metadata documents are disabled; the URL breaks a CIMD rule or its host is
            denied; fetching failed or was declined by a limit (AS-14: the authorization must
            then be aborted; the description never says how a fetch failed); the
            document is not JSON, its ``client_id`` is not the URL, or its metadata is invalid.
    """
    check_before_fetch(settings, client_id)
    cached = cached_client(client_id, cache)
    if cached is not None:
        return cached
    fetch = fetcher or fetcher_for(settings)
    try:
        response = fetch(client_id)
    except (FetchDeclined, FetchError) as exc:
        raise fetch_failed(exc) from exc
    return client_from_response(client_id, response, cache)
