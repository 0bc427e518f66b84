"""The flat keyword arguments ``OAuth`` took at first, mapped onto the grouped options.

Deprecated: a call that uses them warns (``DeprecationWarning``), and they are removed in the
next minor release. This module holds the whole mapping, so that removing it touches this file
and the few lines of ``auth.py`` that call it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from mcpauth.client.callback import (
    DEFAULT_TIMEOUT,
    CallableRedirectHandler,
    LoopbackRedirectHandler,
    RedirectHandler,
)
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.discovery import first_server
from mcpauth.client.options import (
    AuthorizationCodeGrant,
    ClientCredentialsGrant,
    Grant,
    JWTBearerGrant,
    Policy,
)
from mcpauth.client.registration import Registration

# each flat argument, by the grouped option that replaces it
GROUPS: dict[str, tuple[str, ...]] = {
    "credentials": (
        "client_id",
        "client_secret",
        "private_key",
        "signing_alg",
        "token_endpoint_auth_method",
        "client_issuer",
    ),
    "registration": ("client_name", "client_metadata_url"),
    "grant": ("scopes", "identity", "offline_access"),
    "redirect_handler": ("redirect_uri", "open_browser", "callback_timeout"),
    "policy": ("refresh_margin", "max_attempts", "select_server", "clock"),
}
FLAT = frozenset(name for names in GROUPS.values() for name in names)
GRANT_NAMES = ("authorization_code", "client_credentials", "jwt_bearer")


def is_legacy(flat: dict[str, Any], grant: object, redirect_handler: object) -> bool:
    """Whether a call uses the old form: a flat argument, a grant by name, or a plain callable
    as redirect handler (it needed ``redirect_uri``)."""
    plain_callable = callable(redirect_handler) and not isinstance(
        redirect_handler, RedirectHandler
    )
    return bool(flat) or isinstance(grant, str) or plain_callable


def check_names(flat: dict[str, Any], given: Mapping[str, object]) -> None:
    """Refuse unknown names, and a flat argument beside the grouped option that replaces it.

    Raises:
        TypeError: as Python does for a wrong keyword argument.
    """
    unknown = sorted(set(flat) - FLAT)
    if unknown:
        raise TypeError(f"OAuth() got an unexpected keyword argument {unknown[0]!r}")
    for group, names in GROUPS.items():
        both = [name for name in names if name in flat]
        if both and _grouped(given.get(group)):
            raise TypeError(f"OAuth(): pass {group}= or {', '.join(both)}=, not both")


def _grouped(value: object) -> bool:
    """A value in the new form: not absent, not a grant name, not a plain callable handler."""
    if value is None or isinstance(value, str):
        return False
    return isinstance(value, RedirectHandler) or not callable(value)


def warn() -> None:
    warnings.warn(
        "OAuth()'s flat keyword arguments (client_id=, client_name=, scopes=, ...) and grant "
        "names are deprecated and will be removed in the next minor release: pass "
        "credentials=ClientCredentials(...), "
        "registration=Registration(...), grant=AuthorizationCodeGrant(...) and so on "
        "(docs/api/client.md)",
        DeprecationWarning,
        stacklevel=3,
    )


def _credentials(flat: dict[str, Any]) -> ClientCredentials | None:
    if flat.get("client_id") is None:
        return None
    return ClientCredentials(
        client_id=flat["client_id"],
        client_secret=flat.get("client_secret"),
        auth_method=flat.get("token_endpoint_auth_method"),
        private_key=flat.get("private_key"),
        signing_alg=flat.get("signing_alg", "ES256"),
        issuer=flat.get("client_issuer"),
    )


def _grant(flat: dict[str, Any], name: str | None) -> Grant:
    identity = flat.get("identity")
    name = name or ("jwt_bearer" if identity else "authorization_code")
    if name not in GRANT_NAMES:
        raise ValueError(f"unknown grant {name!r}: one of {', '.join(GRANT_NAMES)}")
    scopes = tuple(flat.get("scopes") or ())
    if name == "client_credentials":
        return ClientCredentialsGrant(scopes=scopes)
    if name == "jwt_bearer":
        if identity is None:
            raise ValueError("the jwt_bearer grant needs identity=")
        return JWTBearerGrant(identity=identity, scopes=scopes)
    return AuthorizationCodeGrant(scopes=scopes, offline_access=flat.get("offline_access", True))


def _redirect_handler(
    flat: dict[str, Any], handler: RedirectHandler | Callable[[str], str] | None
) -> RedirectHandler | None:
    redirect_uri: str | None = flat.get("redirect_uri")
    if handler is None:
        if not {"redirect_uri", "open_browser", "callback_timeout"} & set(flat):
            return None
        url = httpx.URL(redirect_uri) if redirect_uri is not None else None
        return LoopbackRedirectHandler(
            port=0 if url is None else (url.port or 80),
            path="/callback" if url is None else url.path,
            open_browser=flat.get("open_browser", True),
            timeout=flat.get("callback_timeout", DEFAULT_TIMEOUT),
        )
    if isinstance(handler, RedirectHandler):
        return handler
    if redirect_uri is None:
        raise ValueError("a callable redirect_handler needs redirect_uri")
    return CallableRedirectHandler(redirect_uri, handler)


def _policy(flat: dict[str, Any]) -> Policy | None:
    if not set(GROUPS["policy"]) & set(flat):
        return None
    return Policy(
        refresh_margin=flat.get("refresh_margin", 60.0),
        max_attempts=flat.get("max_attempts", 3),
        select_server=flat.get("select_server") or first_server,
        clock=flat.get("clock", time.time),
    )


def convert(
    flat: dict[str, Any],
    *,
    credentials: ClientCredentials | None,
    registration: Registration | None,
    grant: Grant | str | None,
    redirect_handler: RedirectHandler | Callable[[str], str] | None,
    policy: Policy | None,
) -> tuple[
    ClientCredentials | None,
    Registration | None,
    Grant,
    RedirectHandler | None,
    Policy | None,
]:
    """The grouped options for a call: the new-form ones as given, the flat ones converted.

    Raises:
        ValueError: a grant name that does not exist, ``jwt_bearer`` without ``identity``, or a
            callable ``redirect_handler`` without ``redirect_uri``.
    """
    if credentials is None:
        credentials = _credentials(flat)
    if registration is None and {"client_name", "client_metadata_url"} & set(flat):
        registration = Registration(
            client_name=flat.get("client_name", Registration.client_name),
            client_metadata_url=flat.get("client_metadata_url"),
        )
    if grant is None or isinstance(grant, str):
        grant = _grant(flat, grant)
    return (
        credentials,
        registration,
        grant,
        _redirect_handler(flat, redirect_handler),
        policy if policy is not None else _policy(flat),
    )
