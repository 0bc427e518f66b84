"""The client_credentials grant (OAuth 2.1 §4.2) for pre-registered confidential clients: no
user, ``sub`` is the client and ``gty`` says so (docs/security.md T22); scopes limited to the
client's allowed scopes; the resource validated as in the code flow."""

from __future__ import annotations

from typing import NamedTuple

from mcpauth.errors import UnauthorizedClient
from mcpauth.server.authorization import checks
from mcpauth.server.authorization.resources import Resources
from mcpauth.server.storage.models import Client, Resource
from mcpauth.server.tokens.issuance import Issuance, for_client, require_proof
from mcpauth.server.tokens.services import TokenServices

GRANT = "client_credentials"


class _Decision(NamedTuple):
    """What a request's ``scope`` and ``resource`` come to for one client record and one
    snapshot of the registered resources (both replaced, never changed, when they change)."""

    client: Client
    resources: Resources
    resource: Resource
    scopes: list[str]


# A machine asks for the same token again and again: the decision is kept for the client
# record and resources snapshot it was made with, and remade when either is another object.
_decisions: dict[tuple[str, str | None, str | None], _Decision] = {}
_DECISIONS_KEPT = 256
_PARAMETER_KEPT = 512  # requests with longer parameters are decided afresh, not kept


def _decide(
    client: Client,
    resources: Resources,
    scope: str | None,
    resource: str | None,
    jkt: str | None,
) -> _Decision:
    """The resource and scopes of the token (see :func:`issue`), the checks in its order.

    Raises:
        InvalidTarget: the resource is unknown.
        InvalidDPoPProof: no proof where the client or the resource requires one.
        InvalidScope: a scope of the resource the client is not allowed.
    """
    key = (client.client_id, scope, resource)
    kept = _decisions.get(key)
    if kept is not None and kept.client is client and kept.resources is resources:
        require_proof(client, kept.resource, jkt)  # the one check that depends on the request
        return kept
    requested = checks.parse_scope(scope)
    target = checks.resolve_resource(resources, resource)
    require_proof(client, target, jkt)
    scopes = checks.scopes_without_refresh(requested, target, client)
    decision = _Decision(client, resources, target, scopes)
    if len(scope or "") + len(resource or "") <= _PARAMETER_KEPT:
        if len(_decisions) >= _DECISIONS_KEPT:
            _decisions.clear()
        _decisions[key] = decision
    return decision


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
        InvalidDPoPProof: no proof where the client or the resource requires one.
    """
    if client.token_endpoint_auth_method == "none":
        raise UnauthorizedClient("client_credentials needs a confidential client")
    resources = resources or ctx.resources.current()
    decision = _decide(client, resources, form.get("scope"), form.get("resource"), jkt)
    return for_client(
        ctx.settings,
        client.client_id,
        decision.resource.uri,
        decision.scopes,
        ctx.now(),
        gty=GRANT,
        jkt=jkt,
    )
