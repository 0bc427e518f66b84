"""Enterprise-managed authorization (MCP extension ``enterprise-managed-authorization``, SEP-990).

The client trades the user's identity assertion from the enterprise IdP for an ID-JAG by
RFC 8693 token exchange at the IdP, then redeems the ID-JAG at the MCP authorization server with
the RFC 7523 ``jwt-bearer`` grant (CL-X2).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

from mcpauth.client._http import HTTPRequest, HTTPResponse, post_form
from mcpauth.client.errors import TokenRequestFailed
from mcpauth.oauth import TOKEN_EXCHANGE, basic_authorization

ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
SAML2_TYPE = "urn:ietf:params:oauth:token-type:saml2"


@dataclass(frozen=True)
class IdentityAssertion:
    """The user's assertion from the enterprise IdP and how to reach the IdP's token endpoint."""

    idp_token_endpoint: str
    subject_token: str = field(repr=False)
    subject_token_type: str = ID_TOKEN_TYPE
    idp_client_id: str | None = None
    idp_client_secret: str | None = field(default=None, repr=False)


def token_exchange_request(
    assertion: IdentityAssertion, *, audience: str, resource: str, scope: str | None
) -> HTTPRequest:
    """RFC 8693 §2.1 request for an ID-JAG; ``audience`` is the MCP authorization server."""
    form = {
        "grant_type": TOKEN_EXCHANGE,
        "requested_token_type": ID_JAG_TYPE,
        "audience": audience,
        "resource": resource,
        "subject_token": assertion.subject_token,
        "subject_token_type": assertion.subject_token_type,
    }
    if scope:
        form["scope"] = scope
    headers: dict[str, str] = {}
    if assertion.idp_client_id and assertion.idp_client_secret:
        headers["authorization"] = basic_authorization(
            assertion.idp_client_id, assertion.idp_client_secret
        )
    elif assertion.idp_client_id:
        form["client_id"] = assertion.idp_client_id
    return post_form(assertion.idp_token_endpoint, form, headers)


def exchange_for_id_jag(
    assertion: IdentityAssertion, *, audience: str, resource: str, scope: str | None
) -> Generator[HTTPRequest, HTTPResponse, str]:
    """Get an ID-JAG from the IdP.

    Raises:
        TokenRequestFailed: the IdP refused or returned something other than an ID-JAG.
    """
    response = yield token_exchange_request(
        assertion, audience=audience, resource=resource, scope=scope
    )
    body = response.json_object() or {}
    if response.status_code != 200:
        raise TokenRequestFailed(
            str(body.get("error") or "server_error"),
            str(body.get("error_description") or "the IdP token exchange failed"),
            status_code=response.status_code,
        )
    token = body.get("access_token")
    if body.get("issued_token_type") != ID_JAG_TYPE or not isinstance(token, str) or not token:
        raise TokenRequestFailed("invalid_response", "the IdP did not issue an ID-JAG")
    return token
