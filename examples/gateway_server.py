"""An MCP server whose tools call other APIs as their caller, never with the caller's token
(it is for this server only): `TokenExchanger` swaps it at the authorization server (RFC 8693)
for a token for another protected MCP server, which the official MCP SDK client calls, and,
with --provider, for the caller's own token at the identity provider they signed in with, to
call that provider's API as them.

    python examples/gateway_server.py --port 8001 --issuer http://127.0.0.1:9000 \
        --downstream http://127.0.0.1:8000/mcp --credentials /tmp/gateway.json \
        [--provider corp --provider-api https://login.example.com/userinfo]

(--credentials: this server's own client id and secret, with the right to exchange, as
examples/embedded_auth_server.py --gateway or `mcpauth clients add --grant-type
urn:ietf:params:oauth:grant-type:token-exchange` wrote them; --provider: the id of an
`[[mcpauth.upstream]]` provider with `keep_tokens = true` and this server in `release_to`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx2
import uvicorn
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

from mcpauth.middleware import (
    ProtectedResource,
    ProtectedResourceMiddleware,
    ScopePolicy,
    TokenExchanger,
)


def build(
    resource: str,
    issuer: str,
    downstream: str,
    client_id: str,
    client_secret: str,
    provider: str | None = None,
    provider_api: str | None = None,
) -> ProtectedResourceMiddleware:
    mcp = MCPServer("gateway")
    exchanger = TokenExchanger(issuer=issuer, client_id=client_id, client_secret=client_secret)

    @mcp.tool()
    async def notes_elsewhere() -> str:
        """The notes of the other server, read as the caller."""
        token = await exchanger.token_for(downstream)  # for the other server, same caller
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(downstream, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("list_notes", {})
        return "".join(part.text for part in result.content if isinstance(part, TextContent))

    if provider and provider_api:

        @mcp.tool()
        async def my_profile() -> str:
            """What the identity provider's API says about the caller, asked as the caller."""
            token = await exchanger.upstream_token(provider)  # the caller's token there
            async with httpx2.AsyncClient(timeout=30) as http:
                answer = await http.get(provider_api, headers={"Authorization": f"Bearer {token}"})
            answer.raise_for_status()
            return answer.text

    return ProtectedResourceMiddleware(
        mcp.streamable_http_app(),
        resource=ProtectedResource(resource, name="Example gateway server"),
        authorization_servers=[issuer],
        policy=ScopePolicy(required="gateway:use"),  # also the scopes its metadata lists
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--issuer", default="http://127.0.0.1:9000")
    parser.add_argument("--downstream", default="http://127.0.0.1:8000/mcp")
    parser.add_argument("--credentials", type=Path, required=True)
    parser.add_argument("--provider", help="an upstream identity provider's id at the issuer")
    parser.add_argument("--provider-api", help="a URL of its API to call as the caller")
    args = parser.parse_args()
    stored = json.loads(args.credentials.read_text())
    resource = f"http://127.0.0.1:{args.port}/mcp"
    app = build(
        resource,
        args.issuer,
        args.downstream,
        stored["client_id"],
        stored["client_secret"],
        args.provider,
        args.provider_api,
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
