"""The authorization endpoint (OAuth 2.1 §4.1.1): validates the request, then hands the user to
the interaction pages. Until the client and its redirect URI are known good, errors render a
page and never redirect (RFC 6749 §4.1.2.1, RFC 9700 §4.11.2; docs/security.md T7). A
metadata-document client is loaded on the event loop before the request's worker thread."""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.errors import (
    InvalidClient,
    InvalidRequest,
    OAuthError,
    UnauthorizedClient,
    UnsupportedResponseType,
)
from mcpauth.server.authorization import checks
from mcpauth.server.authorization.services import AuthorizationServices, authorization_services
from mcpauth.server.browser.outcomes import AuthorizationRequest, error_redirect, see_other
from mcpauth.server.browser.pages import error_page
from mcpauth.server.browser.sessions import load_session, save_session
from mcpauth.server.clients.directory import NOTHING_LOADED, Loaded
from mcpauth.server.clients.metadata_documents import UnacceptableClientMetadata, is_cimd_client_id
from mcpauth.server.clients.records import find_client
from mcpauth.server.clients.redirect_uris import redirect_uri_matches
from mcpauth.server.crypto import new_id
from mcpauth.server.http_io import REPEATED_RESOURCE, media_type, read_body, repeated_names
from mcpauth.server.operations.size_limits import MAX_NONCE_LENGTH, MAX_STATE_LENGTH
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.models import Client, Interaction
from mcpauth.server.threads import run_blocking
from mcpauth.uris import MalformedURL, parse_url

PROMPTS = frozenset({"none", "login", "consent"})
UNKNOWN_CLIENT = (
    "This server does not know the application that sent you here: its registration has "
    "expired or was removed. Go back to the application and reconnect it to this server "
    "(disconnect and connect again, or sign out of this server and back in); it will register "
    "afresh."
)


class Unredirectable(Exception):
    """An error that must be shown to the user, not sent to a redirect URI."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


async def _pairs(request: Request, limit: int) -> list[tuple[str, str]]:
    if request.method == "POST":
        if media_type(request) != "application/x-www-form-urlencoded":
            raise Unredirectable("invalid_request", "The request must be form-encoded")
        try:
            body = (await read_body(request, limit)).decode("utf-8")
        except (OAuthError, UnicodeDecodeError) as exc:
            raise Unredirectable("invalid_request", "The request body is not acceptable") from exc
        return parse_qsl(body, keep_blank_values=True)
    return parse_qsl(request.url.query, keep_blank_values=True)


def _named_client(params: dict[str, str], repeated: set[str]) -> str:
    """The ``client_id`` the request names, once it passed the checks that need no client."""
    if {"client_id", "redirect_uri"} & repeated:
        raise Unredirectable("invalid_request", "client_id and redirect_uri must not be repeated")
    if len(params.get("state", "")) > MAX_STATE_LENGTH:
        # too large to echo safely in a redirect: shown on a page instead
        raise Unredirectable(
            "invalid_request", f"state must not be longer than {MAX_STATE_LENGTH} characters"
        )
    client_id = params.get("client_id")
    if not client_id:
        raise Unredirectable("invalid_request", "The client_id parameter is missing")
    return client_id


def _client_and_redirect(
    ctx: AuthorizationServices, params: dict[str, str], repeated: set[str], loaded: Loaded
) -> tuple[Client, str]:
    client_id = _named_client(params, repeated)
    try:
        client = find_client(ctx, client_id, loaded)
    except UnacceptableClientMetadata as exc:  # the client's configuration: shown, not sent
        raise Unredirectable("invalid_client_metadata", exc.description) from exc
    except InvalidClient as exc:  # a metadata document that cannot be used (AS-14: abort)
        raise Unredirectable("invalid_client", exc.description) from exc
    if client is None:
        # a registration that expired or was removed: the app must register again, which most
        # do when they reconnect (never a redirect: nothing vouches for the redirect_uri)
        raise Unredirectable("invalid_client", UNKNOWN_CLIENT)
    redirect_uri = params.get("redirect_uri")
    if not redirect_uri:
        raise Unredirectable("invalid_request", "The redirect_uri parameter is missing")
    try:
        parse_url(redirect_uri)
    except MalformedURL as exc:
        raise Unredirectable("invalid_request", f"The redirect_uri is a {exc}") from exc
    # RFC 9700 §4.1.3: exact match (any port for loopback, RFC 8252 §7.3)
    if not redirect_uri_matches(redirect_uri, client.redirect_uris):
        raise Unredirectable(
            "invalid_request", "The redirect_uri is not registered for this client"
        )
    return client, redirect_uri


def _validate(
    ctx: AuthorizationServices, client: Client, params: dict[str, str], repeated: set[str], sid: str
) -> AuthorizationRequest:
    if "resource" in repeated:
        raise InvalidRequest(REPEATED_RESOURCE)
    if repeated:
        raise InvalidRequest(f"Parameters must not be repeated: {', '.join(sorted(repeated))}")
    response_type = params.get("response_type")
    if response_type is None:
        raise InvalidRequest("The response_type parameter is missing")
    if response_type != "code":
        raise UnsupportedResponseType("Only response_type=code is supported (OAuth 2.1)")
    if "authorization_code" not in client.grant_types:
        raise UnauthorizedClient("The client is not registered for the authorization_code grant")
    challenge = checks.check_code_challenge(
        params.get("code_challenge"), params.get("code_challenge_method")
    )
    dpop_jkt = checks.check_dpop_jkt(params.get("dpop_jkt"))
    prompt = params.get("prompt")
    if prompt is not None and prompt not in PROMPTS:
        raise InvalidRequest("prompt must be none, login or consent")
    requested_scopes = checks.parse_scope(params.get("scope"))
    resource = checks.resolve_resource(ctx.resources.current(), params.get("resource"))
    scopes = checks.resolve_scopes(
        requested_scopes, resource, client, offline_enabled=ctx.settings.offline_access
    )
    nonce = params.get("nonce")
    if nonce is not None and len(nonce) > MAX_NONCE_LENGTH:
        raise InvalidRequest(f"nonce must not be longer than {MAX_NONCE_LENGTH} characters")
    return AuthorizationRequest(
        client_id=client.client_id,
        redirect_uri=params["redirect_uri"],
        state=params.get("state"),
        code_challenge=challenge,
        resource=resource.uri,
        scopes=scopes.granted,
        offline=scopes.offline,
        prompt=prompt,
        sid=sid,
        dpop_jkt=dpop_jkt,
        nonce=nonce if checks.OPENID in scopes.identity else None,
    )


def _parameters(pairs: list[tuple[str, str]]) -> tuple[dict[str, str], set[str]]:
    """The request's parameters (empty ones count as absent) and the names it repeats."""
    return {name: value for name, value in pairs if value != ""}, repeated_names(pairs)


async def _load(ctx: AuthorizationServices, pairs: list[tuple[str, str]], address: str) -> Loaded:
    """On the event loop, before the request's worker thread: the client of a ``client_id``
    that is a metadata document URL, fetched for the requester at ``address``; nothing when
    the request is refused before its client is looked up."""
    try:
        client_id = _named_client(*_parameters(pairs))
    except Unredirectable:
        return NOTHING_LOADED
    if not is_cimd_client_id(client_id):
        return NOTHING_LOADED
    return Loaded({client_id: await ctx.clients.load_document(client_id, address)})


def _start(
    ctx: AuthorizationServices, pairs: list[tuple[str, str]], sid: str, loaded: Loaded
) -> Response:
    params, repeated = _parameters(pairs)
    try:
        client, redirect_uri = _client_and_redirect(ctx, params, repeated, loaded)
    except Unredirectable as exc:
        return error_page(exc.error, exc.description)
    state = params.get("state") if "state" not in repeated else None
    try:
        request = _validate(ctx, client, params, repeated, sid)
    except OAuthError as error:
        return error_redirect(ctx.settings.issuer, client, redirect_uri, state, error)
    now = ctx.now()
    interaction = Interaction(
        id=new_id(),
        request=request.to_dict(),
        created_at=now,
        expires_at=now + ctx.settings.interaction_ttl,
    )
    with ctx.db.write() as session:
        grant_store.add_interaction(session, interaction)
    return see_other(ctx.endpoint_url(f"interaction/{interaction.id}"))


async def authorize(request: Request) -> Response:
    ctx = authorization_services(request)
    try:
        pairs = await _pairs(request, ctx.settings.max_body_bytes)
    except Unredirectable as exc:
        return error_page(exc.error, exc.description)
    browser = await load_session(ctx, request)
    loaded = await _load(ctx, pairs, request.client.host if request.client else "unknown")
    response = await run_blocking(_start, ctx, pairs, browser.sid, loaded)
    save_session(ctx, browser, response)
    return response
