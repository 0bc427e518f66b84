"""Request reading and response writing shared by the endpoints: bounded bodies, duplicate
parameter detection (OAuth 2.1 §3.1: parameters MUST NOT appear more than once), OAuth error
rendering, no-store caching and CORS for the endpoints that allow it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive

from mcpauth.asgi import BodyIncomplete, BodyTooLarge, read_capped_body
from mcpauth.errors import InvalidRequest, OAuthError, PayloadTooLarge

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
ALLOW_ANY_ORIGIN = {"Access-Control-Allow-Origin": "*"}
CORS_HEADERS = {
    **ALLOW_ANY_ORIGIN,
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, DPoP, MCP-Protocol-Version",
    "Access-Control-Max-Age": "86400",
}
Endpoint = Callable[[Request], Awaitable[Response]]


class UnsupportedMediaType(InvalidRequest):
    status_code = 415


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        names = [name for name, _ in pairs]
        repeated = next(name for name in names if names.count(name) > 1)
        raise ValueError(f"the member {repeated!r} appears more than once")
    return members


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_strict(data: bytes | str) -> Any:
    """Parse JSON (RFC 8259) strictly: a repeated member name in any object (RFC 8259 §4
    leaves it undefined; RFC 7591 metadata must be unambiguous) and the non-JSON constants
    ``NaN``/``Infinity`` are refused.

    Raises:
        ValueError: not valid JSON (also invalid UTF-8), or a rule above is broken.
        RecursionError: nested too deeply.
    """
    return json.loads(data, object_pairs_hook=_unique_members, parse_constant=_refuse_constant)


async def receive_body(receive: Receive, declared_length: str | None, limit: int) -> bytes:
    """The request body from ASGI ``receive``, refused past ``limit`` bytes without reading
    further.

    Raises:
        PayloadTooLarge: the body (or its declared length) exceeds ``limit``.
        ClientDisconnect: the client went away before the body was complete.
    """
    try:
        return await read_capped_body(receive, limit, declared_length=declared_length)
    except BodyTooLarge:
        raise PayloadTooLarge(f"The request body exceeds {limit} bytes") from None
    except BodyIncomplete:
        raise ClientDisconnect() from None


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused past ``limit`` bytes (see :func:`receive_body`)."""
    return await receive_body(request.receive, request.headers.get("content-length"), limit)


def bare_media_type(content_type: str) -> str:
    """``type/subtype`` of a Content-Type value, lowercase, parameters dropped."""
    return content_type.split(";", 1)[0].strip().lower()


def media_type(request: Request) -> str:
    return bare_media_type(request.headers.get("content-type", ""))


def repeated_names(pairs: list[tuple[str, str]]) -> set[str]:
    """The names given more than once (RFC 6749 §3.1: parameters must not be repeated). A
    ``resource`` repeated with the very same value is one resource named twice (Codex CLI does
    that), not two: it is not counted."""
    seen: dict[str, str] = {}
    repeated: set[str] = set()
    for name, value in pairs:
        if name in seen and not (name == "resource" and seen[name] == value):
            repeated.add(name)
        seen.setdefault(name, value)
    return repeated


REPEATED_RESOURCE = (
    "resource was given more than once with different values: name one resource per request"
)


def single_valued(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Parameters as a dict; a repeated name is an error (see :func:`repeated_names`); empty
    values count as absent.

    Raises:
        InvalidRequest: a parameter appears more than once.
    """
    repeated = repeated_names(pairs)
    if "resource" in repeated:
        raise InvalidRequest(REPEATED_RESOURCE)
    if repeated:
        raise InvalidRequest(f"The {sorted(repeated)[0]!r} parameter must not be repeated")
    params = dict(pairs)
    return {k: v for k, v in params.items() if v != ""}


def require_form(content_type: str) -> None:
    """Raises:
    UnsupportedMediaType: ``content_type`` is not ``application/x-www-form-urlencoded``.
    """
    if bare_media_type(content_type) != "application/x-www-form-urlencoded":
        raise UnsupportedMediaType("The request body must be application/x-www-form-urlencoded")


_HEX = "0123456789ABCDEFabcdef"
# The ASCII character each %XX escape below %80 stands for, in every case spelling
_ASCII_ESCAPES = {a + b: chr(int(a + b, 16)) for a in _HEX for b in _HEX if int(a + b, 16) < 128}


def _unquote_plus(text: str) -> str:
    """``urllib.parse.unquote_plus(text)``, without its byte-level work where every escape is
    an ASCII character (a URL in a form: ``%3A``, ``%2F``), which is the common case."""
    if "+" in text:
        text = text.replace("+", " ")
    if "%" not in text:
        return text
    head, *escaped = text.split("%")
    parts = [head]
    for part in escaped:
        char = _ASCII_ESCAPES.get(part[:2])
        if char is None:  # a multi-byte character or an invalid escape: the library decides
            return unquote(text)
        parts += (char, part[2:])
    return "".join(parts)


def form_pairs(text: str) -> list[tuple[str, str]]:
    """The name-value pairs of a form-encoded ``text``, in order, exactly as
    ``urllib.parse.parse_qsl(text, keep_blank_values=True)`` gives them (a name without ``=``
    has an empty value; empty fields are skipped; undecodable escapes become U+FFFD)."""
    pairs = []
    for field in text.split("&"):
        if field:
            name, _, value = field.partition("=")
            pairs.append((_unquote_plus(name), _unquote_plus(value)))
    return pairs


def parse_form(body: bytes) -> dict[str, str]:
    """A form-encoded body, single-valued (see :func:`single_valued`).

    Raises:
        InvalidRequest: a parameter is repeated or the body is not valid UTF-8.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest("The request body is not valid UTF-8") from exc
    return single_valued(form_pairs(text))


async def form_params(request: Request, limit: int) -> dict[str, str]:
    """The form body of ``request``; the media type is checked before the body is read.

    Raises:
        UnsupportedMediaType: another content type.
        PayloadTooLarge: the body is too large.
        InvalidRequest: a parameter is repeated or the body is not valid UTF-8.
    """
    require_form(request.headers.get("content-type", ""))
    return parse_form(await read_body(request, limit))


async def json_body(
    request: Request,
    limit: int,
    error: type[OAuthError],
    *,
    too_large: type[OAuthError] = PayloadTooLarge,
) -> Any:
    """A JSON body (:func:`loads_strict`); malformed, too deep, with a repeated member or of the
    wrong type → ``error``; past ``limit`` bytes → ``too_large``.

    Raises:
        OAuthError: ``error`` or ``too_large``.
    """
    if media_type(request) != "application/json":
        raise error("The request body must be application/json")
    try:
        body = await read_body(request, limit)
    except PayloadTooLarge as exc:
        raise too_large(exc.description) from exc
    try:
        return loads_strict(body)
    except RecursionError as exc:
        raise error("The request body is nested too deeply") from exc
    except ValueError as exc:
        raise error(f"The request body is not valid JSON: {exc}") from exc


def json_response(
    data: Any, status_code: int = 200, *, headers: dict[str, str] | None = None
) -> Response:
    return JSONResponse(data, status_code=status_code, headers=headers)


def error_response(error: OAuthError, *, headers: Mapping[str, str] | None = None) -> Response:
    """RFC 6749 §5.2 JSON error body; never cached."""
    merged = {**NO_STORE, **error.headers, **(headers or {})}
    return JSONResponse(error.to_dict(), status_code=error.status_code, headers=merged)


def cors(endpoint: Endpoint) -> Endpoint:
    """Allow cross-origin calls (metadata, JWKS, token, registration; never authorize)."""

    async def wrapped(request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=CORS_HEADERS)
        response = await endpoint(request)
        response.headers.update(ALLOW_ANY_ORIGIN)
        return response

    return wrapped


def oauth_errors(endpoint: Endpoint) -> Endpoint:
    """Render an ``OAuthError`` raised by a JSON endpoint as its RFC response."""

    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except OAuthError as error:
            return error_response(error)

    return wrapped


def client_ip(request: Request) -> str:
    """The requester's address: behind ``trusted_proxies`` the one they forwarded (the app's
    proxy-headers middleware has rewritten ``request.client`` by then), else the peer's."""
    return request.client.host if request.client else "unknown"
