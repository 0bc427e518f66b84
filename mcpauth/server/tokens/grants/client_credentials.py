"""The client_credentials grant (OAuth 2.1 §4.2) for pre-registered confidential clients: no
user, ``sub`` is the client and ``gty`` says so (docs/security.md T22); scopes limited to the
client's allowed scopes; the resource validated as in the code flow."""

from __future__ import annotations

from mcpauth.errors import UnauthorizedClient
from mcpauth.server.authorization import checks
from mcpauth.server.authorization.resources import Resources
from mcpauth.server.storage.models import Client
from mcpauth.server.tokens.issuance import Issuance, access_token_claims, require_proof
from mcpauth.server.tokens.services import TokenServices

GRANT = "client_credentials"


def issue(
    ctx: TokenServices,
    client: Client,
    form: dict[str, str],
    resources: Resources | None = None,
    *,
    jkt: str | None = None,
) -> Issuance:
    """Issue an access token to the client itself (``resources``: the registered resources
    when the caller already has them; no I/O then).

    Raises:
        UnauthorizedClient: a public client.
        InvalidTarget: the resource is unknown.
        InvalidScope: a scope of the resource the client is not allowed (unknown ones are
            narrowed away).
    """
    if client.token_endpoint_auth_method == "none":
        raise UnauthorizedClient("client_credentials needs a confidential client")
    requested = checks.parse_scope(form.get("scope"))
    resource = checks.resolve_resource(resources or ctx.resources.current(), form.get("resource"))
    require_proof(client, resource, jkt)
    scopes = checks.scopes_without_refresh(requested, resource, client)
    now = ctx.now()
    claims = access_token_claims(
        ctx.settings,
        subject=client.client_id,
        client_id=client.client_id,
        resource=resource.uri,
        scopes=scopes,
        now=now,
        extra={"gty": GRANT},
    )
    issuance = Issuance(claims, scopes)
    if jkt is not None:
        issuance.bind(jkt)
    return issuance
