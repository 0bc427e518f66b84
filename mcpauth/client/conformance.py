"""Driver for the official MCP conformance suite's client scenarios.

    python -m mcpauth.client.conformance URL

The suite sets ``MCP_CONFORMANCE_SCENARIO`` (and ``MCP_CONFORMANCE_CONTEXT`` as JSON for
scenarios with credentials) and appends the server URL as the last argument. The only choices
made per scenario are the credentials and the grant, as in the suite's reference client; the
rest is the ordinary :class:`~mcpauth.client.OAuth` driving the official MCP Python SDK.

Needs the ``conformance`` extra (the ``client`` extra and the MCP SDK); without it, it says which
package is missing and exits with 2.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import httpx2

from mcpauth.client._extras import CONFORMANCE, first_missing, install_hint
from mcpauth.client.auth import OAuth
from mcpauth.client.callback import CallableRedirectHandler
from mcpauth.client.credentials import ClientCredentials
from mcpauth.client.enterprise import IdentityAssertion
from mcpauth.client.errors import ClientError
from mcpauth.client.options import (
    ClientCredentialsGrant,
    JWTBearerGrant,
    WorkloadIdentityGrant,
)
from mcpauth.client.registration import Registration
from mcpauth.jwt import private_key_from_pem

CIMD_URL = "https://conformance-test.local/client-metadata.json"
REDIRECT_URI = "http://localhost:3000/callback"
TIMEOUT = 20.0


def follow_without_browser(authorization_url: str) -> str:
    """Stand in for the user: GET the authorization URL and read the redirect's ``Location``."""
    response = httpx2.get(authorization_url, follow_redirects=False, timeout=TIMEOUT)
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise ClientError(f"the authorization endpoint answered {response.status_code}")
    return str(response.url.join(location))


def build_auth(server_url: str, scenario: str, context: dict[str, Any]) -> OAuth:
    """The per-scenario choice of credentials and grant; everything else is common."""
    handler = CallableRedirectHandler(REDIRECT_URI, follow_without_browser)
    registration = Registration(
        client_name="mcpauth conformance client", client_metadata_url=CIMD_URL
    )
    if scenario == "auth/client-credentials-jwt":
        key = private_key_from_pem(context["private_key_pem"].encode())
        credentials = ClientCredentials(
            context["client_id"],
            private_key=key,
            signing_alg=context.get("signing_algorithm", "ES256"),
        )
        return OAuth(server_url, credentials=credentials, grant=ClientCredentialsGrant())
    if scenario == "auth/client-credentials-basic":
        credentials = ClientCredentials(context["client_id"], context["client_secret"])
        return OAuth(server_url, credentials=credentials, grant=ClientCredentialsGrant())
    if "valid_jwt" in context:  # workload identity federation: the platform token is all
        workload = WorkloadIdentityGrant(token=context["valid_jwt"])
        named = ClientCredentials(context["client_id"]) if context.get("client_id") else None
        return OAuth(server_url, credentials=named, grant=workload)
    if "idp_token_endpoint" in context:
        identity = IdentityAssertion(
            idp_token_endpoint=context["idp_token_endpoint"],
            subject_token=context["idp_id_token"],
            idp_client_id=context.get("idp_client_id"),
        )
        return OAuth(
            server_url,
            credentials=ClientCredentials(context["client_id"], context["client_secret"]),
            grant=JWTBearerGrant(identity),
        )
    if "client_id" in context:  # pre-registration
        credentials = ClientCredentials(context["client_id"], context.get("client_secret"))
        return OAuth(server_url, credentials=credentials, redirect_handler=handler)
    return OAuth(server_url, registration=registration, redirect_handler=handler)


async def exercise(server_url: str, auth: OAuth) -> None:
    """List tools and call the first one, as the scenarios expect, through the SDK's
    ``mcp.Client``: it speaks both protocol eras (the ``initialize`` handshake of 2025-11-25
    and before, and the self-contained requests of 2026-07-28), choosing by what the server
    answers."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(TIMEOUT)) as http:
        transport = streamable_http_client(server_url, http_client=http)
        async with Client(transport, raise_exceptions=True) as client:
            tools = await client.list_tools()
            names = [tool.name for tool in tools.tools]
            if names:
                await client.call_tool(names[0], {})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m mcpauth.client.conformance URL", file=sys.stderr)
        return 2
    missing = first_missing(CONFORMANCE)
    if missing is not None:
        print(f"conformance client: {install_hint(missing, 'conformance')}", file=sys.stderr)
        return 2
    from mcp.shared.exceptions import MCPError

    server_url = args[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    auth = build_auth(server_url, scenario, context)
    failures: list[BaseException] = []
    try:
        anyio.run(exercise, server_url, auth)
    except* (ClientError, MCPError) as group:
        failures.extend(group.exceptions)
    for exc in failures:
        print(f"conformance client: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
