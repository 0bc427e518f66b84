"""RFC 7591 client metadata validation: every field checked, errors name the field.

The result is what gets stored and echoed; unknown members are ignored (RFC 7591 §2) and
client-chosen ``client_id``/``client_secret`` values never are used (docs/security.md T22)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mcpauth.errors import InvalidClientMetadata
from mcpauth.oauth import (
    AUTH_METHODS,
    DEVICE_CODE,
    JWT_BEARER,
    TOKEN_EXCHANGE,
    MalformedScope,
    format_scope,
    parse_scope,
)
from mcpauth.server.clients.redirect_uris import check_redirect_uri, host_of
from mcpauth.server.operations.size_limits import (
    MAX_CONTACTS,
    MAX_NAME_LENGTH,
    MAX_REDIRECT_URIS,
    MAX_SCOPE_LENGTH,
    MAX_URI_LENGTH,
)
from mcpauth.uris import MalformedURL, URIError, canonical_resource, is_loopback_host, parse_url

# RFC 8628: a device (a command line, a TV) registers for the device grant like any client
REGISTRABLE_GRANTS = ("authorization_code", "refresh_token", DEVICE_CODE)
ADMIN_GRANTS = ("client_credentials", JWT_BEARER, TOKEN_EXCHANGE)
_FORBIDDEN_GRANTS = {
    "implicit": "the implicit grant is removed in OAuth 2.1",
    "password": "the password grant must not be used (RFC 9700 §2.4)",
    "client_credentials": "client_credentials clients are pre-registered by an administrator",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
URI_FIELDS = ("client_uri", "logo_uri", "tos_uri", "policy_uri", "jwks_uri")


@dataclass
class ValidatedClient:
    """Client metadata that passed every check, ready to store."""

    redirect_uris: list[str]
    grant_types: list[str]
    response_types: list[str]
    token_endpoint_auth_method: str
    application_type: str
    client_name: str
    scope: str | None
    jwks: dict[str, Any] | None
    jwks_uri: str | None
    extra: dict[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The registered metadata as echoed in RFC 7591/7592 responses."""
        doc: dict[str, Any] = {
            "redirect_uris": self.redirect_uris,
            "grant_types": self.grant_types,
            "response_types": self.response_types,
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
            "application_type": self.application_type,
        }
        # absent members are left out, never null or "" (clients validate what they get back)
        for key in ("client_name", "scope", "jwks", "jwks_uri"):
            value = getattr(self, key)
            if value is not None and value != "":
                doc[key] = value
        doc.update(self.extra)
        return doc


def _string(raw: dict[str, Any], name: str, *, limit: int = MAX_NAME_LENGTH) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidClientMetadata(f"{name}: must be a string")
    if len(value) > limit:
        raise InvalidClientMetadata(f"{name}: longer than {limit} characters")
    if _CONTROL.search(value):
        raise InvalidClientMetadata(f"{name}: must not contain control characters")
    return value


def _string_list(raw: dict[str, Any], name: str, *, limit: int) -> list[str] | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidClientMetadata(f"{name}: must be an array of strings")
    if len(value) > limit:
        raise InvalidClientMetadata(f"{name}: more than {limit} entries")
    return list(dict.fromkeys(value))


def _https_uri(raw: dict[str, Any], name: str) -> str | None:
    value = _string(raw, name, limit=MAX_URI_LENGTH)
    if value is None:
        return None
    try:
        parts = parse_url(value)
    except MalformedURL as exc:
        raise InvalidClientMetadata(f"{name}: {exc}") from exc
    if parts.scheme != "https" or not parts.hostname or "@" in parts.netloc or parts.fragment:
        raise InvalidClientMetadata(f"{name}: must be an https URL without userinfo or fragment")
    return value


def _grants(raw: dict[str, Any], admin: bool) -> tuple[list[str], list[str]]:
    grants = _string_list(raw, "grant_types", limit=10) or ["authorization_code"]
    allowed = (*REGISTRABLE_GRANTS, *ADMIN_GRANTS) if admin else REGISTRABLE_GRANTS
    for grant in grants:
        if grant not in allowed and grant in _FORBIDDEN_GRANTS:
            raise InvalidClientMetadata(f"grant_types: {_FORBIDDEN_GRANTS[grant]}")
        if grant not in allowed:
            raise InvalidClientMetadata(f"grant_types: {grant!r} is not supported")
    code_flow = "authorization_code" in grants
    default_responses = ["code"] if code_flow else []
    responses = _string_list(raw, "response_types", limit=5)
    responses = default_responses if responses is None else responses
    for response in responses:
        if response != "code":
            raise InvalidClientMetadata(
                f"response_types: {response!r} is not supported; use 'code'"
            )
    # RFC 7591 §2.1: grant_types and response_types must agree
    if code_flow != ("code" in responses):
        raise InvalidClientMetadata(
            "grant_types and response_types disagree: 'authorization_code' goes with 'code'"
        )
    if "refresh_token" in grants and not (code_flow or DEVICE_CODE in grants):
        raise InvalidClientMetadata(
            "grant_types: 'refresh_token' needs 'authorization_code' or the device grant"
        )
    return grants, responses


def _application_type(raw: dict[str, Any], uris: list[str]) -> str:
    declared = _string(raw, "application_type")
    if declared is None:
        # Clients from before application_type (MCP 2026-07-28) registering loopback or
        # private-use redirects are native apps (RFC 8252).
        native = all(
            not u.lower().startswith("https:")
            and (not u.lower().startswith("http:") or is_loopback_host(host_of(u)))
            for u in uris
        )
        return "native" if native and uris else "web"
    if declared not in ("native", "web"):
        raise InvalidClientMetadata("application_type: must be 'native' or 'web'")
    return declared


def _scope(raw: dict[str, Any], known: set[str], *, admin: bool) -> str | None:
    """The registered ``scope``. An operator's unknown scope is a typo, refused; a client
    registering itself (or its metadata document) may name scopes it guessed (``claudeai``,
    ``read write``): those are left out, as the authorization endpoint narrows them (RFC 7591
    §3.2.1 lets the server register other values than asked; the response says which)."""
    value = _string(raw, "scope", limit=MAX_SCOPE_LENGTH)
    try:
        scopes = parse_scope(value, strict=True)
    except MalformedScope as exc:
        raise InvalidClientMetadata(f"scope: {exc}") from exc
    if not scopes:  # `scope: ""` (Gemini CLI, Inspector v2) asks for nothing in particular
        return None
    for scope in scopes:
        if scope not in known and admin:
            raise InvalidClientMetadata(f"scope: unknown scope {scope!r}")
    return format_scope(s for s in scopes if s in known) or None


def _auth_method(raw: dict[str, Any], supported: tuple[str, ...]) -> str:
    """The registered method; RFC 7591 §2's default ``client_secret_basic`` when omitted (the
    MCP Python SDK from 1.23 omits it): the client is issued a secret, which it may then send
    by Basic or in the body (``clients.authentication``)."""
    method = _string(raw, "token_endpoint_auth_method") or "client_secret_basic"
    if method not in supported:
        choices = ", ".join(supported)
        raise InvalidClientMetadata(
            f"token_endpoint_auth_method: {method!r} is not supported; use one of {choices}"
        )
    return method


def _jwks(raw: dict[str, Any]) -> dict[str, Any] | None:
    value = raw.get("jwks")
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("keys"), list):
        raise InvalidClientMetadata("jwks: must be a JSON Web Key Set object with 'keys'")
    if len(value["keys"]) > 10:
        raise InvalidClientMetadata("jwks: more than 10 keys")
    for key in value["keys"]:
        if not isinstance(key, dict) or "d" in key or key.get("kty") == "oct":
            raise InvalidClientMetadata("jwks: keys must be public asymmetric keys")
    return value


def _extras(raw: dict[str, Any]) -> dict[str, Any]:
    """The optional descriptive members, each checked."""
    extra: dict[str, Any] = {}
    for name in ("client_uri", "logo_uri", "tos_uri", "policy_uri"):
        if (uri := _https_uri(raw, name)) is not None:
            extra[name] = uri
    for name in ("software_id", "software_version"):
        if (text := _string(raw, name)) is not None:
            extra[name] = text
    bound = raw.get("dpop_bound_access_tokens")
    if bound is not None:
        if not isinstance(bound, bool):
            raise InvalidClientMetadata("dpop_bound_access_tokens must be true or false")
        extra["dpop_bound_access_tokens"] = bound  # RFC 9449 §5.2
    contacts = _string_list(raw, "contacts", limit=MAX_CONTACTS)
    if contacts is not None:
        if any(len(c) > MAX_NAME_LENGTH for c in contacts):
            raise InvalidClientMetadata(
                f"contacts: entries longer than {MAX_NAME_LENGTH} characters"
            )
        extra["contacts"] = contacts
    return extra


EXCHANGE_MEMBERS = ("exchange_from", "exchange_to")


def _exchange_policy(raw: dict[str, Any], grants: list[str], *, admin: bool) -> dict[str, Any]:
    """Token exchange (RFC 8693) rights, which only the operator grants: the resources whose
    tokens the client may exchange (``exchange_from``, usually its own URL: an MCP server
    acting for its callers) and the resources it may get tokens for (``exchange_to``)."""
    present = [name for name in EXCHANGE_MEMBERS if name in raw]
    if not present:
        if TOKEN_EXCHANGE in grants:
            raise InvalidClientMetadata("token exchange needs exchange_from and exchange_to")
        return {}
    if not admin:
        raise InvalidClientMetadata(f"{present[0]}: only the operator sets exchange rights")
    if TOKEN_EXCHANGE not in grants:
        raise InvalidClientMetadata(f"{present[0]}: needs the token-exchange grant")
    policy: dict[str, Any] = {}
    for name in EXCHANGE_MEMBERS:
        values = _string_list(raw, name, limit=20)
        if not values:
            raise InvalidClientMetadata(f"{name}: at least one resource URI")
        try:
            policy[name] = [canonical_resource(value) for value in values]
        except URIError as exc:
            raise InvalidClientMetadata(f"{name}: {exc}") from exc
    return policy


def validate_client_metadata(
    raw: object,
    *,
    known_scopes: set[str],
    auth_methods: tuple[str, ...] = AUTH_METHODS,
    admin: bool = False,
) -> ValidatedClient:
    """Check an RFC 7591 registration request body (``admin``: also client_credentials).

    Raises:
        InvalidClientMetadata: a field is malformed or not allowed.
        InvalidRedirectUri: a redirect URI breaks the registration rules.
    """
    if not isinstance(raw, dict):
        raise InvalidClientMetadata("the request body must be a JSON object")
    grants, responses = _grants(raw, admin)
    uris = _string_list(raw, "redirect_uris", limit=MAX_REDIRECT_URIS) or []
    if not uris and "authorization_code" in grants:
        raise InvalidClientMetadata("redirect_uris: required for the authorization_code grant")
    application_type = _application_type(raw, uris)
    method = _auth_method(raw, auth_methods)
    for index, uri in enumerate(uris):
        check_redirect_uri(
            uri,
            application_type=application_type,
            public=method == "none",
            field=f"redirect_uris[{index}]",
        )
    jwks = _jwks(raw)
    jwks_uri = _https_uri(raw, "jwks_uri")
    if jwks is not None and jwks_uri is not None:
        raise InvalidClientMetadata("jwks and jwks_uri must not both be present (RFC 7591 §2)")
    if method == "private_key_jwt" and jwks is None and jwks_uri is None:
        raise InvalidClientMetadata("private_key_jwt requires jwks or jwks_uri")
    if method == "none" and ({"client_credentials", TOKEN_EXCHANGE} & set(grants)):
        raise InvalidClientMetadata(
            "client_credentials and token exchange need a confidential client"
        )
    if method == "none" and JWT_BEARER in grants and not admin:
        # a public jwt-bearer client is a workload whose platform token is its credential,
        # which only the operator can set up (a workload rule names it)
        raise InvalidClientMetadata("jwt-bearer needs a confidential client")
    client_name = _string(raw, "client_name")
    if client_name is not None and not client_name.strip():
        raise InvalidClientMetadata("client_name: must not be blank")
    return ValidatedClient(
        redirect_uris=uris,
        grant_types=grants,
        response_types=responses,
        token_endpoint_auth_method=method,
        application_type=application_type,
        client_name=client_name or "",
        scope=_scope(raw, known_scopes, admin=admin),
        jwks=jwks,
        jwks_uri=jwks_uri,
        extra={**_extras(raw), **_exchange_policy(raw, grants, admin=admin)},
    )
