"""The UserInfo endpoint (OpenID Connect Core §5.3): who the person behind an access token is.

It takes the access tokens of this server that were issued to a person's grant holding
``openid``, whatever resource they are for: their ``aud`` is the MCP resource, never this
endpoint, so the grant decides (a machine's token, an exchanged one and one whose grant lacks
``openid`` get ``insufficient_scope``). The claims follow the grant's scopes
(:func:`mcpauth.server.tokens.openid.person_claims`).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mcpauth import dpop
from mcpauth.errors import InsufficientScope, InvalidDPoPProof, InvalidToken, OAuthError
from mcpauth.oauth import parse_scope
from mcpauth.server.authorization.checks import OPENID
from mcpauth.server.http_io import ALLOW_ANY_ORIGIN, NO_STORE, json_response
from mcpauth.server.storage import grant_store
from mcpauth.server.storage.defences import record_jti
from mcpauth.server.threads import run_blocking
from mcpauth.server.tokens.introspection import access_token_claims
from mcpauth.server.tokens.openid import person_claims
from mcpauth.server.tokens.services import TokenServices, token_services

_EXPOSE = {"Access-Control-Expose-Headers": "WWW-Authenticate"}


def _presented(request: Request) -> tuple[str, str]:
    """``(scheme, token)`` of the Authorization header (RFC 6750 §2.1, RFC 9449 §7.1).

    Raises:
        InvalidToken: no token: a bare challenge, without an error code (RFC 6750 §3.1).
    """
    scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
    scheme = scheme.lower()
    if scheme not in ("bearer", "dpop") or not token.strip():
        algs = " ".join(dpop.ALGORITHMS)
        raise InvalidToken(headers={"WWW-Authenticate": f'Bearer, DPoP algs="{algs}"'})
    return ("DPoP" if scheme == "dpop" else "Bearer"), token.strip()


def _check_binding(
    ctx: TokenServices, request: Request, scheme: str, token: str, claims: dict[str, Any]
) -> None:
    """A DPoP-bound token is presented with the DPoP scheme and a proof of its key.

    Raises:
        InvalidToken: a bound token sent as Bearer, or a DPoP one that is not bound.
        InvalidDPoPProof: the proof fails a check of RFC 9449 §4.3, or was used before.
    """
    cnf = claims.get("cnf")
    jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
    if scheme == "Bearer":
        if jkt is not None:
            raise InvalidToken("The access token is bound to a DPoP key: use the DPoP scheme")
        return
    if not isinstance(jkt, str):
        raise InvalidToken("The access token is not DPoP-bound: use the Bearer scheme")
    now = ctx.now()
    proof = dpop.check_proof(
        request.headers.getlist("dpop"),
        method=request.method,
        url=ctx.endpoint_url("userinfo"),
        now=now,
        access_token=token,
        jkt=jkt,
    )
    with ctx.db.write() as session:
        if not record_jti(session, f"dpop {proof.jkt}", proof.jti, proof.expires_at, now):
            raise InvalidDPoPProof("The DPoP proof was used before: make a new one per request")


def _answer(ctx: TokenServices, request: Request, scheme: str, token: str) -> dict[str, Any]:
    """The UserInfo response for ``token``.

    Raises:
        InvalidToken: not a live access token of this server.
        InsufficientScope: the token's grant does not hold ``openid``.
    """
    claims = access_token_claims(ctx, token)
    if claims is None:
        raise InvalidToken("The access token is invalid, expired or revoked")
    _check_binding(ctx, request, scheme, token, claims)
    grant_id = claims.get("gid")
    with ctx.db.read() as session:
        # a person's own token: not a machine's (gty) nor one exchanged for another client
        grant = None
        if isinstance(grant_id, str) and "gty" not in claims and "act" not in claims:
            grant = grant_store.live_grant(session, grant_id)
        scopes = parse_scope(grant.scope) if grant is not None else []
        if grant is None or grant.client_id != claims["client_id"] or OPENID not in scopes:
            raise InsufficientScope(
                "The access token was not issued with the openid scope",
                headers={
                    "WWW-Authenticate": f'{scheme} error="insufficient_scope", scope="openid"'
                },
            )
        return {"sub": grant.user_id, **person_claims(session, grant.user_id, scopes)}


async def userinfo(request: Request) -> Response:
    """GET or POST /userinfo with the access token in the Authorization header (Core §5.3.1)."""
    ctx = token_services(request)
    scheme = "Bearer"
    try:
        scheme, token = _presented(request)
        body = await run_blocking(_answer, ctx, request, scheme, token)
    except OAuthError as error:
        headers = {**_EXPOSE, **error.headers}
        if "WWW-Authenticate" not in headers:  # RFC 6750 §3: every refusal carries a challenge
            description = error.to_dict().get("error_description", "")
            headers["WWW-Authenticate"] = (
                f'{scheme} error="{error.error}", error_description="{description}"'
            )
        if not error.description:
            return Response(status_code=401, headers={**NO_STORE, **ALLOW_ANY_ORIGIN, **headers})
        # RFC 6750 §3.1, RFC 9449 §7.1: a protected resource answers a bad proof with 401
        status = 403 if isinstance(error, InsufficientScope) else 401
        return json_response(
            error.to_dict(), status, headers={**NO_STORE, **ALLOW_ANY_ORIGIN, **headers}
        )
    return json_response(body, headers={**NO_STORE, **ALLOW_ANY_ORIGIN})
