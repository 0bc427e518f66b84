"""The device authorization grant, client side (RFC 8628): ask for a device code and a user
code, show the person where to type it, then poll the token endpoint at the interval the server
asks for (5 seconds more after each ``slow_down``) until the person decides or the code expires.

Sans-I/O like the rest of the flow: :func:`device_flow` yields the request, a
:class:`ShowUserCode` step (the runner shows it to the person) and :class:`Wait` steps (the runner
sleeps); the token polls go through the flow's own token call, with DPoP when it is on."""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpauth.client._http import HTTPRequest, HTTPResponse, post_form
from mcpauth.client.credentials import ClientCredentials, authenticate
from mcpauth.client.errors import AuthorizationFailed, TokenRequestFailed
from mcpauth.client.tokens import TokenSet, assertion_audience
from mcpauth.oauth import DEVICE_CODE
from mcpauth.uris import secure_or_loopback

if TYPE_CHECKING:  # pydantic only when a flow runs (not for a stored token)
    from mcpauth.metadata import AuthorizationServerMetadata

SLOW_DOWN_SECONDS = 5  # RFC 8628 §3.5
DEFAULT_INTERVAL = 5  # RFC 8628 §3.2: when the server names none
MAX_INTERVAL = 60  # however often a server says slow_down, the wait is bounded


@dataclass(frozen=True)
class DeviceAuthorization:
    """What the person is shown: where to go and the code to type there (RFC 8628 §3.2).
    ``verification_uri_complete`` holds the code already (a link or a QR code)."""

    verification_uri: str
    user_code: str
    verification_uri_complete: str | None
    expires_in: int
    interval: int


@dataclass(frozen=True)
class ShowUserCode:
    """Show the person ``authorization``: the URL to open and the code to type."""

    authorization: DeviceAuthorization


@dataclass(frozen=True)
class Wait:
    """Wait ``seconds`` before the next step (a runner sleeps; a test just sends ``None``)."""

    seconds: float


def print_user_code(authorization: DeviceAuthorization) -> None:
    """The default way to show the code: two lines on stderr."""
    minutes = max(1, authorization.expires_in // 60)
    print(
        f"To sign in, open {authorization.verification_uri} and type the code "
        f"{authorization.user_code} (it expires in {minutes} minutes).",
        file=sys.stderr,
    )
    if authorization.verification_uri_complete:
        print(f"Or open {authorization.verification_uri_complete}", file=sys.stderr)
    sys.stderr.flush()


ShowCallback = Callable[[DeviceAuthorization], None]


def device_authorization_request(
    metadata: AuthorizationServerMetadata,
    credentials: ClientCredentials,
    *,
    resource: str | None,
    scope: str | None,
    now: float | None = None,
) -> HTTPRequest:
    """The RFC 8628 §3.1 request, with client authentication as at the token endpoint.

    Raises:
        AuthorizationFailed: the server offers no device authorization endpoint.
    """
    endpoint = metadata.device_authorization_endpoint
    if not endpoint:
        raise AuthorizationFailed(
            f"{metadata.issuer} does not offer the device authorization grant "
            "(no device_authorization_endpoint in its metadata)",
            error="unsupported_grant_type",
        )
    form: dict[str, str] = {}
    if resource:
        form["resource"] = resource
    if scope:
        form["scope"] = scope
    headers = authenticate(credentials, form, audience=assertion_audience(metadata), now=now)
    return post_form(endpoint, form, headers)


def _positive_int(value: Any, default: int) -> int:
    number = isinstance(value, int) and not isinstance(value, bool)
    return value if number and value > 0 else default


def parse_device_authorization(response: HTTPResponse) -> tuple[str, DeviceAuthorization]:
    """The device code and what to show, from an RFC 8628 §3.2 response.

    Raises:
        TokenRequestFailed: an error response (its RFC code).
        AuthorizationFailed: a success without a device code, a user code or a usable URL.
    """
    body = response.json_object()
    if response.status_code != 200 or body is None:
        body = body or {}
        raise TokenRequestFailed(
            str(body.get("error") or "server_error"),
            str(body.get("error_description") or f"answered {response.status_code}"),
            status_code=response.status_code,
        )
    device_code, user_code = body.get("device_code"), body.get("user_code")
    uri, complete = body.get("verification_uri"), body.get("verification_uri_complete")
    if not isinstance(device_code, str) or not device_code or not isinstance(user_code, str):
        raise AuthorizationFailed("the device authorization response has no device or user code")
    if not isinstance(uri, str) or not secure_or_loopback(uri):
        raise AuthorizationFailed("the verification_uri is not an https (or loopback) URL")
    if not isinstance(complete, str) or not secure_or_loopback(complete):
        complete = None
    return device_code, DeviceAuthorization(
        verification_uri=uri,
        user_code=user_code,
        verification_uri_complete=complete,
        expires_in=_positive_int(body.get("expires_in"), 600),
        interval=_positive_int(body.get("interval"), DEFAULT_INTERVAL),
    )


def device_code_form(device_code: str, *, resource: str | None) -> dict[str, str]:
    form = {"grant_type": DEVICE_CODE, "device_code": device_code}
    if resource:
        form["resource"] = resource
    return form


TokenCall = Callable[[dict[str, str]], Generator[Any, Any, TokenSet]]


def device_flow(
    start: HTTPRequest,
    token_call: TokenCall,
    *,
    resource: str | None,
    clock: Callable[[], float],
    timeout: float | None = None,
) -> Generator[Any, Any, TokenSet]:
    """Send ``start``, show the code, then poll with ``token_call`` until there are tokens.

    Raises:
        AuthorizationFailed: the person denied the request (``access_denied``), or the code
            expired or ``timeout`` passed first (``expired_token``).
        TokenRequestFailed: the token endpoint refused for another reason.
    """
    response: HTTPResponse = yield start
    device_code, authorization = parse_device_authorization(response)
    yield ShowUserCode(authorization)
    lifetime = float(authorization.expires_in)
    deadline = clock() + (lifetime if timeout is None else min(lifetime, timeout))
    interval = float(authorization.interval)
    form = device_code_form(device_code, resource=resource)
    while True:
        yield Wait(interval)
        if clock() >= deadline:
            raise AuthorizationFailed(
                "the code was not approved in time; start again", error="expired_token"
            )
        try:
            return (yield from token_call(form))
        except TokenRequestFailed as failed:
            if failed.error == "slow_down":
                interval = min(interval + SLOW_DOWN_SECONDS, MAX_INTERVAL)
            elif failed.error == "access_denied":
                raise AuthorizationFailed("the request was denied", error="access_denied") from None
            elif failed.error == "expired_token":
                raise AuthorizationFailed(
                    "the code expired before it was approved; start again", error="expired_token"
                ) from None
            elif failed.error != "authorization_pending":
                raise
