"""The HTTP side of every call mcpauth makes to an upstream provider: a transport that reads
at most a fixed number of (decompressed) bytes of any answer, and the errors those calls end
in (the provider unavailable, its token endpoint refusing, its user API saying nothing usable),
each with a short reason for logs that never holds a token or a secret."""

from __future__ import annotations

import zlib

import httpx2

from mcpauth.errors import FetchError
from mcpauth.server.identity.id_tokens import IDTokenError

MAX_RESPONSE_BYTES = 256 * 1024  # discovery, a JWKS, a token response, a user API
_IDENTITY_ENCODINGS = ("", "identity")
_ZLIB_ENCODINGS = ("gzip", "x-gzip", "deflate")


class UpstreamUnavailable(Exception):
    """The provider could not be used: down, slow, too large, or not speaking OpenID Connect
    as configured. ``reason`` is a short code for logs."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UpstreamRefused(Exception):
    """The provider's token endpoint answered with an OAuth error (its code in ``error``)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class ProfileError(Exception):
    """A plain OAuth 2.0 provider's user API did not say who signed in (no usable subject, not
    a JSON object, the token refused); ``reason`` is a short code for logs."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _ResponseTooLarge(httpx2.TransportError):
    pass


class CappedTransport(httpx2.AsyncBaseTransport):
    """Reads a whole response, at most ``max_bytes`` of it (decompressed), before the client
    sees it; anything longer is a transport error and the rest is never read."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int) -> None:
        self.inner = inner
        self.max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        try:
            body = await self._read(response)
        finally:
            await response.aclose()
        headers = [
            (name, value)
            for name, value in response.headers.multi_items()
            if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return httpx2.Response(response.status_code, headers=headers, content=body, request=request)

    async def _read(self, response: httpx2.Response) -> bytes:
        try:
            content = response.content  # already in memory (a stand-in transport's response)
        except httpx2.ResponseNotRead:
            pass
        else:
            if len(content) > self.max_bytes:
                raise _ResponseTooLarge("response too large")
            return content
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise _ResponseTooLarge("response too large")
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in _IDENTITY_ENCODINGS + _ZLIB_ENCODINGS:
            raise _ResponseTooLarge(f"unsupported content-encoding {encoding[:20]!r}")
        inflate = zlib.decompressobj(47) if encoding in _ZLIB_ENCODINGS else None
        body = bytearray()
        async for chunk in response.aiter_raw():
            # inflated no further than one byte past the cap: a small bomb stays small
            body += inflate.decompress(chunk, self.max_bytes + 1 - len(body)) if inflate else chunk
            if len(body) > self.max_bytes:
                raise _ResponseTooLarge("response too large")
        if inflate is not None:
            body += inflate.flush()
            if len(body) > self.max_bytes:
                raise _ResponseTooLarge("response too large")
        return bytes(body)

    async def aclose(self) -> None:
        await self.inner.aclose()


def error_code(value: object) -> str:
    """An OAuth error code as it may be shown and logged: its own characters, short."""
    text = value if isinstance(value, str) else ""
    allowed = "".join(ch for ch in text if 0x20 <= ord(ch) <= 0x7E and ch not in '"\\')
    return allowed[:60] or "error"


def reason(exc: BaseException) -> str:
    """A short code for logs and refusal pages: why a call to a provider failed."""
    if isinstance(exc, UpstreamUnavailable | IDTokenError | ProfileError):
        return exc.reason
    if isinstance(exc, FetchError):  # a provider's keys: the fetch's own reason
        return exc.message
    if isinstance(exc, TimeoutError | httpx2.TimeoutException):
        return "timeout"
    if isinstance(exc, _ResponseTooLarge):
        return "too_large"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"http_{exc.response.status_code}"
    return "unreachable"
