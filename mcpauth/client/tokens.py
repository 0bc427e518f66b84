"""Token requests and responses (RFC 6749 §4.1.3, §4.4, §5, §6; RFC 8707; RFC 7523 §2.1)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mcpauth.client._http import HTTPRequest, HTTPResponse, post_form
from mcpauth.client.credentials import ClientCredentials, authenticate
from mcpauth.client.errors import TokenRequestFailed
from mcpauth.oauth import JWT_BEARER

if TYPE_CHECKING:
    from mcpauth.metadata import AuthorizationServerMetadata


@dataclass(frozen=True)
class TokenSet:
    """Tokens with an absolute expiry, so a restarted process knows whether to refresh."""

    access_token: str
    token_type: str = "Bearer"
    expires_at: float | None = None
    refresh_token: str | None = None
    scope: str | None = None

    def __repr__(self) -> str:  # tokens never reach logs
        return f"TokenSet(expires_at={self.expires_at!r}, scope={self.scope!r})"

    def expires_within(self, seconds: float, now: float) -> bool:
        return self.expires_at is not None and self.expires_at - seconds <= now

    @property
    def bound(self) -> bool:
        """Whether the token is DPoP-bound (RFC 9449 §5: ``token_type`` ``DPoP``)."""
        return self.token_type.lower() == "dpop"

    @property
    def authorization(self) -> str:
        return f"{'DPoP' if self.bound else 'Bearer'} {self.access_token}"

    def to_json(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "token_type": self.token_type,
            "expires_at": self.expires_at,
            "refresh_token": self.refresh_token,
            "scope": self.scope,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TokenSet:
        return cls(
            access_token=data["access_token"],
            token_type=data.get("token_type") or "Bearer",
            expires_at=data.get("expires_at"),
            refresh_token=data.get("refresh_token"),
            scope=data.get("scope"),
        )


def token_endpoint(metadata: AuthorizationServerMetadata) -> str:
    if not metadata.token_endpoint:
        raise TokenRequestFailed(
            "invalid_request", "the authorization server has no token endpoint"
        )
    return metadata.token_endpoint


def assertion_audience(metadata: AuthorizationServerMetadata) -> str:
    """``aud`` of client assertions: the issuer identifier (RFC 7523 §3, MCP CL-X1)."""
    return metadata.issuer


def token_request(
    metadata: AuthorizationServerMetadata,
    credentials: ClientCredentials,
    form: dict[str, str],
    *,
    now: float | None = None,
) -> HTTPRequest:
    """A token request with client authentication applied."""
    body = dict(form)
    headers = authenticate(credentials, body, audience=assertion_audience(metadata), now=now)
    return post_form(token_endpoint(metadata), body, headers)


def authorization_code_form(
    code: str, *, redirect_uri: str, verifier: str, resource: str
) -> dict[str, str]:
    # RFC 8707 §2: the same resource as in the authorization request.
    return {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
        "resource": resource,
    }


def refresh_form(refresh_token: str, *, resource: str) -> dict[str, str]:
    return {"grant_type": "refresh_token", "refresh_token": refresh_token, "resource": resource}


def client_credentials_form(*, resource: str, scope: str | None) -> dict[str, str]:
    form = {"grant_type": "client_credentials", "resource": resource}
    if scope:
        form["scope"] = scope
    return form


def jwt_bearer_form(assertion: str, *, resource: str, scope: str | None) -> dict[str, str]:
    form = {"grant_type": JWT_BEARER, "assertion": assertion, "resource": resource}
    if scope:
        form["scope"] = scope
    return form


def parse_token_response(
    response: HTTPResponse,
    *,
    now: float | None = None,
    requested_scope: str | None = None,
    dpop: bool = False,
) -> TokenSet:
    """A :class:`TokenSet` from a token endpoint response.

    Raises:
        TokenRequestFailed: an error response, or a success without a usable access token.
    """
    body = response.json_object()
    if response.status_code != 200 or body is None:
        body = body or {}
        raise TokenRequestFailed(
            str(body.get("error") or "server_error"),
            str(body.get("error_description") or f"token endpoint answered {response.status_code}"),
            status_code=response.status_code,
        )
    access_token = body.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise TokenRequestFailed("invalid_response", "the token response has no access_token")
    token_type = str(body.get("token_type") or "Bearer")
    # a DPoP-bound token only answers a request that carried a proof (``dpop``)
    if token_type.lower() not in (("bearer", "dpop") if dpop else ("bearer",)):
        raise TokenRequestFailed("invalid_response", f"unsupported token_type {token_type!r}")
    expires_in = body.get("expires_in")
    issued = time.time() if now is None else now
    expires_at = issued + float(expires_in) if isinstance(expires_in, int | float) else None
    refresh = body.get("refresh_token")
    scope = body.get("scope")
    return TokenSet(
        access_token=access_token,
        token_type="DPoP" if token_type.lower() == "dpop" else "Bearer",
        expires_at=expires_at,
        refresh_token=refresh if isinstance(refresh, str) and refresh else None,
        # RFC 6749 §5.1: scope omitted means identical to the requested scope
        scope=scope if isinstance(scope, str) else requested_scope,
    )


def merge_refreshed(old: TokenSet, new: TokenSet) -> TokenSet:
    """Keep the old refresh token when the server did not rotate it (RFC 6749 §6)."""
    if new.refresh_token is None and old.refresh_token is not None:
        return replace(new, refresh_token=old.refresh_token)
    return new
