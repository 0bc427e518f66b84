"""The token endpoint (OAuth 2.1 §3.2): client authentication, then the grant's own module.
Load, then transact: what the request needs from the network (the client's metadata document
or keys, a trusted issuer's keys) is awaited on the event loop first; then the request runs in
one worker thread with it, and fetches nothing there. Responses are never cached (RFC 6749
§5.1)."""

from __future__ import annotations

from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mcpauth import dpop
from mcpauth.errors import (
    InvalidDPoPProof,
    InvalidRequest,
    OAuthError,
    UnauthorizedClient,
    UnsupportedGrantType,
    UseDPoPNonce,
)
from mcpauth.jwt import compact_json
from mcpauth.server.clients import authentication
from mcpauth.server.clients.authentication import PresentedCredentials
from mcpauth.server.clients.directory import NOTHING_LOADED, Loaded
from mcpauth.server.http_io import (
    ALLOW_ANY_ORIGIN,
    CORS_HEADERS,
    NO_STORE,
    error_response,
    parse_form,
    receive_body,
    require_form,
)
from mcpauth.server.operations.logs import audit
from mcpauth.server.storage.defences import record_jti
from mcpauth.server.storage.models import Client
from mcpauth.server.threads import run_blocking
from mcpauth.server.tokens.grants import (
    authorization_code,
    client_credentials,
    device_code,
    jwt_bearer,
    refresh_token,
    token_exchange,
    workload,
)
from mcpauth.server.tokens.issuance import Issuance, UpstreamIssuance
from mcpauth.server.tokens.services import TokenServices

GRANTS = {
    "authorization_code": authorization_code.exchange,
    "refresh_token": refresh_token.refresh,
    "client_credentials": client_credentials.issue,
    jwt_bearer.GRANT: jwt_bearer.issue,
    token_exchange.GRANT: token_exchange.exchange,
    device_code.GRANT: device_code.poll,
}
# A grant's own network I/O, awaited on the event loop before the request's worker thread (and
# its database work) starts: the trusted issuer's keys of a jwt-bearer assertion. The client's
# (its metadata document, its jwks_uri) is loaded for every grant (:func:`_load`).
BEFORE = {
    jwt_bearer.GRANT: jwt_bearer.load_keys,
}


def _audit(grant_type: str, client: Client, issuance: Issuance) -> None:
    if isinstance(issuance, UpstreamIssuance):
        return  # no token of this server: the exchange audited itself
    claims = issuance.claims
    audit(
        "token.refreshed" if grant_type == "refresh_token" else "token.issued",
        grant_type=grant_type,
        client_id=client.client_id,
        sub=claims["sub"],
        aud=claims["aud"],
        jti=claims["jti"],
        refresh_token=issuance.refresh_token is not None,
    )


def _proven_key(ctx: TokenServices, proofs: list[str], client: Client) -> str | None:
    """The thumbprint of the key a request's DPoP proof proves (RFC 9449 §4.3), its ``jti``
    recorded for single use across replicas; None without a proof.

    Raises:
        InvalidDPoPProof: a check failed, or the proof was used before.
    """
    if not proofs:
        return None
    now = ctx.now()
    proof = dpop.check_proof(proofs, method="POST", url=ctx.endpoint_url("token"), now=now)
    nonces = ctx.dpop_nonces
    if nonces is not None and not nonces.accepts(proof.nonce, now):
        # checked before the jti is recorded: the retry with the nonce is a new proof anyway
        raise UseDPoPNonce(
            "This server requires a DPoP nonce: use the one in the DPoP-Nonce header",
            headers={"DPoP-Nonce": nonces.current(now)},
        )
    with ctx.db.write() as session:
        fresh = record_jti(session, f"dpop {proof.jkt}", proof.jti, proof.expires_at, now)
    if not fresh:
        audit("replay.detected", kind="dpop_proof", client_id=client.client_id)
        raise InvalidDPoPProof("The DPoP proof was used before: make a new one per request")
    return proof.jkt


def _respond(
    ctx: TokenServices,
    form: dict[str, str],
    authorization: str | None,
    address: str,
    credentials: PresentedCredentials | None,
    proofs: list[str],
    loaded: Loaded,
) -> bytes:
    """The whole token request in one worker thread: client authentication, the grant
    (database and signing) and the JSON body, with what :func:`_load` loaded from the network
    before."""
    grant_type = form.get("grant_type")
    if not grant_type:
        raise InvalidRequest("grant_type is required")
    handler = GRANTS.get(grant_type)
    if handler is None:
        raise UnsupportedGrantType(f"grant_type {grant_type!r} is not supported")
    client = authentication.authenticate_request(
        ctx,
        form,
        authorization,
        address,
        endpoint="token",
        loaded=loaded,
        credentials=credentials,
    )
    if grant_type not in client.grant_types:
        raise UnauthorizedClient(f"The client is not registered for the {grant_type} grant")
    jkt = _proven_key(ctx, proofs, client)
    issuance = handler(ctx, client, form, jkt=jkt)
    _audit(grant_type, client, issuance)
    return compact_json(issuance.response(ctx.keys.signer()))


def _as_workload(
    ctx: TokenServices,
    form: dict[str, str],
    authorization: str | None,
    credentials: PresentedCredentials | None,
) -> tuple[dict[str, str], PresentedCredentials | None]:
    """The request's form and credentials, for a jwt-bearer request whose workload token is
    the whole credential: its client is the one the token's rule names."""
    if (
        form.get("grant_type") == jwt_bearer.GRANT
        and authorization is None
        and not (form.keys() & {"client_id", "client_assertion"})
    ):
        named = workload.client_for(ctx.settings, form.get("assertion") or "")
        if named is not None:
            form = {**form, "client_id": named}
            return form, _credentials(None, form)
    return form, credentials


async def _load(
    ctx: TokenServices,
    form: dict[str, str],
    credentials: PresentedCredentials | None,
    address: str,
) -> Loaded:
    """The request's network I/O, on the event loop before its worker thread: the grant's own
    (:data:`BEFORE`) and the client's (:func:`authentication.load_client`). Nothing for a
    grant type the worker thread refuses before it looks at the client.

    Raises:
        TemporarilyUnavailable: a trusted issuer's keys cannot be loaded now.
    """
    grant_type = form.get("grant_type", "")
    if grant_type not in GRANTS:
        return NOTHING_LOADED
    before = BEFORE.get(grant_type)
    if before is not None:
        await before(ctx, form, address)
    if credentials is None:
        return NOTHING_LOADED
    return await authentication.load_client(ctx, credentials, address)


def _credentials(authorization: str | None, form: dict[str, str]) -> PresentedCredentials | None:
    """The request's client credentials, parsed once; None if they are malformed (then
    :func:`_respond` raises the error in its place, after the grant type is checked)."""
    try:
        return authentication.presented_credentials(authorization, form)
    except OAuthError:
        return None


def _answer_from_memory(
    ctx: TokenServices,
    form: dict[str, str],
    credentials: PresentedCredentials | None,
    address: str,
) -> bytes | None:
    """The answer to a client_credentials request computed from what is in memory (the
    client, its lockout state, the resources, the signing key), on the event loop without the
    worker-thread hop; None when anything would have to be read or written, and the request
    then takes :func:`_respond` in a worker thread. Each lookup returns its value or nothing,
    so nothing here can start I/O.

    Raises:
        OAuthError: the request is refused for a reason that needs no I/O to decide
            (a scope the client may not have or an unknown resource, say).
    """
    if form.get("grant_type") != client_credentials.GRANT or credentials is None:
        return None
    resources = ctx.resources.cached()
    signer = ctx.keys.cached_signer()
    if resources is None or signer is None:
        return None
    client = authentication.authenticated_from_memory(ctx, credentials, address, ctx.now())
    if client is None or client_credentials.GRANT not in client.grant_types:
        return None
    issuance = client_credentials.issue(ctx, client, form, resources)
    _audit(client_credentials.GRANT, client, issuance)
    return compact_json(issuance.response(signer))


class TokenEndpoint:
    """The token endpoint as a bare ASGI app: every token a client gets passes through here,
    so it reads the few headers it needs from the scope and writes its answer directly,
    without Starlette's request and response objects. CORS is allowed (browser clients)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "OPTIONS":
            await Response(status_code=204, headers=CORS_HEADERS)(scope, receive, send)
            return
        ctx: TokenServices = scope["app"].state.mcpauth
        content_type = authorization = length = None
        proofs: list[str] = []
        for name, value in scope["headers"]:
            if name == b"content-type" and content_type is None:
                content_type = value.decode("latin-1")
            elif name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"content-length" and length is None:
                length = value.decode("latin-1")
            elif name == b"dpop":
                proofs.append(value.decode("latin-1"))
        client = scope.get("client")
        address = client[0] if client else "unknown"
        try:
            require_form(content_type or "")
            form = parse_form(await receive_body(receive, length, ctx.settings.max_body_bytes))
            credentials = _credentials(authorization, form)
            # a DPoP proof's jti is recorded in the database: never on the event loop
            body = None if proofs else _answer_from_memory(ctx, form, credentials, address)
            if body is None:
                form, credentials = _as_workload(ctx, form, authorization, credentials)
                loaded = await _load(ctx, form, credentials, address)
                body = await run_blocking(
                    _respond, ctx, form, authorization, address, credentials, proofs, loaded
                )
        except ClientDisconnect:
            return  # nobody left to answer
        except OAuthError as error:
            extra = {**ALLOW_ANY_ORIGIN, **_nonce_headers(ctx)}
            response = error_response(error, headers={**extra, **error.headers})
            await response(scope, receive, send)
            return
        headers = [*_RESPONSE_HEADERS, (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in _nonce_headers(ctx).items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _nonce_headers(ctx: TokenServices) -> dict[str, str]:
    """The current DPoP nonce on every token response when nonces are required (RFC 9449
    §8.2), readable by browser clients."""
    if ctx.dpop_nonces is None:
        return {}
    return {
        "DPoP-Nonce": ctx.dpop_nonces.current(ctx.now()),
        "Access-Control-Expose-Headers": "DPoP-Nonce",
    }


_RESPONSE_HEADERS = [
    (b"content-type", b"application/json"),
    *((k.lower().encode(), v.encode()) for k, v in {**NO_STORE, **ALLOW_ANY_ORIGIN}.items()),
]
token = TokenEndpoint()
