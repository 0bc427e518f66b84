"""An MCP server whose tool calls another protected MCP server as its caller: the caller's token
stays here (it is for this server only); `TokenExchanger` swaps it at the authorization server
(RFC 8693) for a token for the other server, and the official MCP SDK client calls it.

    python examples/gateway_server.py --port 8001 --issuer http://127.0.0.1:9000 \
        --downstream http://127.0.0.1:8000/mcp --credentials /tmp/gateway.json

(--credentials: this server's own client id and secret, with the right to exchange, as
examples/embedded_auth_server.py --gateway wrote them)."""

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

from mcpauth.middleware import ProtectedResourceMiddleware, TokenExchanger


def build(
    resource: str, issuer: str, downstream: str, client_id: str, client_secret: str
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

    return ProtectedResourceMiddleware(
        mcp.streamable_http_app(),
        resource=resource,
        authorization_servers=[issuer],
        scopes_supported=["gateway:use"],
        required_scopes="gateway:use",
        resource_name="Example gateway server",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--issuer", default="http://127.0.0.1:9000")
    parser.add_argument("--downstream", default="http://127.0.0.1:8000/mcp")
    parser.add_argument("--credentials", type=Path, required=True)
    args = parser.parse_args()
    stored = json.loads(args.credentials.read_text())
    resource = f"http://127.0.0.1:{args.port}/mcp"
    app = build(
        resource, args.issuer, args.downstream, stored["client_id"], stored["client_secret"]
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
