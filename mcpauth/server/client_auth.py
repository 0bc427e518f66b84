"""Client authentication at the token endpoint (OAuth 2.1 §2.4): exactly one method, the
one the client registered; secrets compared as digests in constant time; failures throttled
per client and per address (attacks.md rows 18, 19)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from mcpauth.errors import InvalidClient, InvalidRequest, TooManyRequests
from mcpauth.server import throttle
from mcpauth.server._authlib import basic_credentials
from mcpauth.server.secrets import matches
from mcpauth.server.storage.accounts import get_client
from mcpauth.server.storage.models import Client

CHALLENGE = {"WWW-Authenticate": 'Basic realm="mcpauth", charset="UTF-8"'}
SECRET_FAILURES = throttle.Limit(failures=20, window=900, lockout=60)


@dataclass(frozen=True)
class PresentedCredentials:
    client_id: str
    secret: str | None
    method: str


def presented_credentials(authorization: str | None, form: dict[str, str]) -> PresentedCredentials:
    """The one authentication method the request uses.

    Raises:
        InvalidRequest: more than one method, or a Basic client_id that differs from the body's.
        InvalidClient: no client identification at all, or a malformed Basic header.
    """
    body_secret = form.get("client_secret")
    body_id = form.get("client_id")
    if authorization and authorization.split(" ", 1)[0].lower() == "basic":
        basic = basic_credentials(authorization)
        if basic is None:
            raise InvalidClient("The Basic authorization header is malformed", headers=CHALLENGE)
        if body_secret is not None:
            raise InvalidRequest("Use exactly one client authentication method")
        if body_id is not None and body_id != basic[0]:
            raise InvalidRequest("client_id in the body differs from the authenticated client")
        return PresentedCredentials(basic[0], basic[1], "client_secret_basic")
    if not body_id:
        raise InvalidClient("Client authentication is required", headers=CHALLENGE)
    if body_secret is not None:
        return PresentedCredentials(body_id, body_secret, "client_secret_post")
    return PresentedCredentials(body_id, None, "none")


def _keys(credentials: PresentedCredentials, address: str) -> tuple[str, str]:
    return (f"client:{credentials.client_id}", f"client-ip:{address}")


def record_failure(
    session: Session, credentials: PresentedCredentials, *, now: int, address: str
) -> None:
    """Count a failed secret for the client and the address."""
    if credentials.secret is not None:
        for key in _keys(credentials, address):
            throttle.record_failure(session, key, now, SECRET_FAILURES)


def authenticate(
    session: Session, credentials: PresentedCredentials, *, now: int, address: str
) -> Client:
    """The registered client the credentials prove (reads only; see :func:`record_failure`).

    Raises:
        InvalidClient: unknown client, wrong method or wrong secret (one uniform error).
        TooManyRequests: too many failures for this client or address.
    """
    keys = _keys(credentials, address)
    if credentials.secret is not None:
        wait = max(throttle.retry_after(session, key, now) for key in keys)
        if wait:
            raise TooManyRequests("Too many failed client authentications", retry_after=wait)
    client = get_client(session, credentials.client_id)
    method_ok = client is not None and client.token_endpoint_auth_method == credentials.method
    if credentials.secret is None:
        if method_ok:
            return client  # type: ignore[return-value]
        raise InvalidClient("Client authentication failed", headers=CHALLENGE)
    # Always compare, so unknown clients and wrong secrets take the same time.
    secret_ok = matches(credentials.secret, client.secret_digest if client else None)
    if (
        method_ok
        and secret_ok
        and client is not None
        and (client.secret_expires_at == 0 or client.secret_expires_at > now)
    ):
        return client
    raise InvalidClient("Client authentication failed", headers=CHALLENGE)
