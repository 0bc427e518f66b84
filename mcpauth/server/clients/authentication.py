"""Client authentication at the token endpoint (OAuth 2.1 §2.4): exactly one method per
request, of the kind the client registered (a secret-bearing client may send its secret by
Basic or in the body, whichever it registered); secrets compared as digests in constant
time; failures throttled per client and per address (docs/security.md T18, T19). What the
network must give (a metadata document, a ``jwks_uri``'s keys) is loaded on the event loop
first (:func:`load_client`), then the worker thread authenticates with it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.errors import InvalidClient, InvalidRequest, OAuthError, TooManyRequests
from mcpauth.oauth import CLIENT_ASSERTION_TYPE, SECRET_METHODS, parse_basic_authorization
from mcpauth.server.clients.assertions import (
    unverified_kid,
    unverified_subject,
    verify_client_assertion,
)
from mcpauth.server.clients.directory import NOTHING_LOADED, Loaded
from mcpauth.server.clients.metadata_documents import is_cimd_client_id
from mcpauth.server.clients.records import find_client
from mcpauth.server.clients.services import ClientServices
from mcpauth.server.crypto import digest, matches
from mcpauth.server.http_io import NO_STORE, client_ip, error_response, form_params, json_response
from mcpauth.server.operations import lockout as throttle
from mcpauth.server.operations.logs import audit
from mcpauth.server.operations.size_limits import address_in_key
from mcpauth.server.storage.database import Session
from mcpauth.server.storage.models import Client
from mcpauth.server.threads import run_blocking

CHALLENGE = {"WWW-Authenticate": 'Basic realm="mcpauth", charset="UTF-8"'}
# Failures are counted per (client, address) and per address, never per client alone: an
# outsider naming a client from many addresses slows only itself. Machine secrets have full
# entropy, so a guess spread over many addresses is hopeless and needs no per-client lock.
SECRET_FAILURES = throttle.Limit(failures=20, window=900, lockout=60)
ADDRESS_FAILURES = throttle.Limit(failures=100, window=900, lockout=60)


def method_accepted(registered: str, presented: str) -> bool:
    """Whether a request authenticating with ``presented`` satisfies a client registered for
    ``registered``. The two secret methods carry the same secret and differ only in where it
    travels; real clients pick one regardless of what they registered (the Python SDK registers
    nothing and sends Basic, VS Code and Gemini CLI send the body), so either is accepted."""
    if registered in SECRET_METHODS:
        return presented in SECRET_METHODS
    return registered == presented


@dataclass(frozen=True)
class PresentedCredentials:
    client_id: str
    secret: str | None
    method: str


def _assertion_credentials(form: dict[str, str]) -> PresentedCredentials:
    if form.get("client_assertion_type") != CLIENT_ASSERTION_TYPE:
        raise InvalidClient("client_assertion_type must be " + CLIENT_ASSERTION_TYPE)
    assertion = form.get("client_assertion", "")
    client_id = unverified_subject(assertion)
    if client_id is None:
        raise InvalidClient("client_assertion is not a JWT with an iss claim", headers=CHALLENGE)
    if form.get("client_id", client_id) != client_id:
        raise InvalidRequest("client_id differs from the client assertion's issuer")
    return PresentedCredentials(client_id, assertion, "private_key_jwt")


def presented_credentials(authorization: str | None, form: dict[str, str]) -> PresentedCredentials:
    """The one authentication method the request uses.

    Raises:
        InvalidRequest: more than one method, or a Basic client_id that differs from the body's.
        InvalidClient: no client identification at all, or a malformed Basic header.
    """
    body_secret = form.get("client_secret")
    body_id = form.get("client_id")
    uses_basic = bool(authorization) and str(authorization).split(" ", 1)[0].lower() == "basic"
    if "client_assertion" in form or "client_assertion_type" in form:
        if uses_basic or body_secret is not None:
            raise InvalidRequest("Use exactly one client authentication method")
        return _assertion_credentials(form)
    if authorization and uses_basic:
        basic = parse_basic_authorization(authorization)
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


def authenticated_from_memory(
    ctx: ClientServices, credentials: PresentedCredentials, address: str, now: int
) -> Client | None:
    """The client these credentials prove, decided from memory alone: a secret-authenticated
    client whose row and lockout state are cached, not locked, with the right and unexpired
    secret for its registered method. None in every other case, also a wrong secret: the
    caller then takes :func:`authenticate_request`'s path, which counts the failure with a
    database write (never on the event loop)."""
    if credentials.method not in SECRET_METHODS:
        return None
    client = ctx.clients.cached(credentials.client_id)
    if client is None or ctx.lockouts.cached_retry_after(_keys(credentials, address), now) != 0:
        return None
    if (
        method_accepted(client.token_endpoint_auth_method, credentials.method)
        and matches(credentials.secret or "", client.secret_digest)
        and (client.secret_expires_at == 0 or client.secret_expires_at > now)
    ):
        return client
    return None


def _keys(credentials: PresentedCredentials, address: str) -> tuple[str, str]:
    """(client at this address, this address): the client id is digested, so a name the
    requester chose never makes a long key (nor does an over-long address)."""
    if len(credentials.client_id) + len(address) <= _MEMO_MAX_LENGTH:
        return _keys_memo(credentials.client_id, address)
    return _keys_of(credentials.client_id, address)


def _keys_of(client_id: str, address: str) -> tuple[str, str]:
    named, where = digest(client_id)[:32], address_in_key(address)
    return (f"client-at:{named}:{where}", f"client-ip:{where}")


_MEMO_MAX_LENGTH = 300  # the keys of longer ids and addresses are made afresh each time
# every request of a client from its address names the same keys: made once
_keys_memo = functools.lru_cache(maxsize=1024)(_keys_of)


def record_failure(
    session: Session, credentials: PresentedCredentials, *, now: int, address: str
) -> None:
    """Count a failed secret or assertion for the client at this address and the address."""
    if credentials.method != "none":
        at_address, address_key = _keys(credentials, address)
        throttle.record_failure(session, at_address, now, SECRET_FAILURES)
        throttle.record_failure(session, address_key, now, ADDRESS_FAILURES)


async def _locked(
    ctx: ClientServices, credentials: PresentedCredentials, address: str, now: int
) -> bool:
    keys = _keys(credentials, address)
    wait = ctx.lockouts.cached_retry_after(keys, now)
    if wait is None:
        wait = await run_blocking(ctx.lockouts.retry_after, keys, now)
    return wait != 0


async def load_client(
    ctx: ClientServices, credentials: PresentedCredentials, address: str
) -> Loaded:
    """On the event loop, before the request's worker thread: what :func:`authenticate_request`
    will need from the network for these credentials, fetched for the requester at ``address``:
    a metadata-document client, and the ``jwks_uri`` keys of a ``private_key_jwt`` client.
    Nothing is fetched where the worker thread will refuse the request first (an address or
    client locked out, a client registered for another method); failures are kept for the
    worker thread to raise (and count) at the point where it needs what failed."""
    cimd = is_cimd_client_id(credentials.client_id)
    if not cimd and credentials.method != "private_key_jwt":
        return NOTHING_LOADED
    now = ctx.now()
    if credentials.method != "none" and await _locked(ctx, credentials, address, now):
        return NOTHING_LOADED
    documents: dict[str, Client | InvalidClient] = {}
    client: Client | InvalidClient | None
    if cimd:
        client = documents[credentials.client_id] = await ctx.clients.load_document(
            credentials.client_id, address
        )
    else:
        client = await ctx.clients.registered(ctx.db, credentials.client_id)
    if (
        not isinstance(client, Client)
        or credentials.method != "private_key_jwt"
        or not method_accepted(client.token_endpoint_auth_method, credentials.method)
    ):
        return Loaded(documents)
    kid = unverified_kid(credentials.secret or "")
    keys = await ctx.clients.load_keys(client, address, kid=kid)
    if keys is None or client.jwks_uri is None:
        return Loaded(documents)
    return Loaded(documents, {client.jwks_uri: keys})


async def load_request_client(
    ctx: ClientServices, form: dict[str, str], authorization: str | None, address: str
) -> Loaded:
    """:func:`load_client` for the credentials a request presents; nothing when they are
    malformed (the worker thread refuses the request)."""
    try:
        credentials = presented_credentials(authorization, form)
    except OAuthError:
        return NOTHING_LOADED
    return await load_client(ctx, credentials, address)


def authenticate(
    ctx: ClientServices,
    credentials: PresentedCredentials,
    *,
    now: int,
    address: str,
    loaded: Loaded,
) -> Client:
    """The registered client the credentials prove (reads only; see :func:`record_failure`).
    A metadata-document client is the one ``loaded`` from its URL (and stored).

    Raises:
        InvalidClient: unknown client, wrong method or wrong secret (one uniform error).
        TooManyRequests: too many failures for this client or address.
    """
    keys = _keys(credentials, address)
    if credentials.method != "none":
        wait = ctx.lockouts.retry_after(keys, now)
        if wait:
            raise TooManyRequests("Too many failed client authentications", retry_after=wait)
    client = find_client(ctx, credentials.client_id, loaded)
    method_ok = client is not None and method_accepted(
        client.token_endpoint_auth_method, credentials.method
    )
    if credentials.method in ("none", "private_key_jwt"):  # the assertion is checked after
        if method_ok and client is not None:
            return client
        raise InvalidClient("Client authentication failed", headers=CHALLENGE)
    # Always compare, so unknown clients and wrong secrets take the same time.
    secret_ok = matches(credentials.secret or "", client.secret_digest if client else None)
    if (
        method_ok
        and secret_ok
        and client is not None
        and (client.secret_expires_at == 0 or client.secret_expires_at > now)
    ):
        return client
    raise InvalidClient("Client authentication failed", headers=CHALLENGE)


def authenticate_request(
    ctx: ClientServices,
    form: dict[str, str],
    authorization: str | None,
    address: str,
    *,
    endpoint: str,
    loaded: Loaded,
    credentials: PresentedCredentials | None = None,
) -> Client:
    """Authenticate the client of a token, revocation or introspection request, in its worker
    thread, with what :func:`load_client` ``loaded`` for it (``credentials``: what
    :func:`presented_credentials` already found in it).

    Raises:
        InvalidRequest: the request mixes authentication methods.
        InvalidClient: authentication failed (the failure is counted).
        TooManyRequests: the client or address is locked out.
    """
    credentials = credentials or presented_credentials(authorization, form)
    now = ctx.now()
    try:
        client = authenticate(ctx, credentials, now=now, address=address, loaded=loaded)
        if credentials.method == "private_key_jwt" and credentials.secret is not None:
            verify_client_assertion(ctx, client, credentials.secret, endpoint, loaded)
    except InvalidClient:
        with ctx.db.write() as session:
            record_failure(session, credentials, now=now, address=address)
        ctx.lockouts.forget(_keys(credentials, address))
        audit(
            "client.authentication_failed",
            client_id=credentials.client_id[:200],
            method=credentials.method,
            address=address,
        )
        raise
    return client


Services = TypeVar("Services", bound=ClientServices)
# what an endpoint does for the client it authenticated: (ctx, client, form) -> JSON body
ClientWork = Callable[[Services, Client, dict[str, str]], dict[str, Any]]


def _authenticated_work(
    ctx: Services,
    form: dict[str, str],
    authorization: str | None,
    address: str,
    endpoint: str,
    loaded: Loaded,
    work: ClientWork[Services],
) -> dict[str, Any]:
    client = authenticate_request(
        ctx, form, authorization, address, endpoint=endpoint, loaded=loaded
    )
    return work(ctx, client, form)


async def authenticated_answer(
    ctx: Services, request: Request, endpoint: str, work: ClientWork[Services]
) -> Response:
    """The answer to a request the client authenticates, other than a token request (RFC 7009
    revocation, RFC 7662 introspection): the form read and what the client's credentials need
    from the network loaded on the event loop (:func:`load_request_client`), then in a worker
    thread the client authenticated (:func:`authenticate_request`) and ``work(ctx, client,
    form)`` done. Its body as JSON, never cached, or the OAuth error any step raised."""
    try:
        form = await form_params(request, ctx.settings.max_body_bytes)
        authorization, address = request.headers.get("authorization"), client_ip(request)
        loaded = await load_request_client(ctx, form, authorization, address)
        body = await run_blocking(
            _authenticated_work, ctx, form, authorization, address, endpoint, loaded, work
        )
    except OAuthError as error:
        return error_response(error)
    return json_response(body, headers=NO_STORE)
