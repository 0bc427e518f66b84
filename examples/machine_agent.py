"""A program that calls a protected MCP server as itself: mcpauth's client helper obtains a
client_credentials token (discovering the authorization server from the MCP server's 401) and
the official MCP SDK client calls a tool with it.

    python examples/machine_agent.py --url http://127.0.0.1:8000/mcp --credentials /tmp/agent.json

(the credentials file is what examples/embedded_auth_server.py wrote)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from mcpauth.client import ClientCredentials, ClientCredentialsGrant, MemoryStorage, OAuth


async def call(
    url: str,
    client_id: str,
    client_secret: str,
    tool: str = "list_notes",
    scope: str = "notes:read",
) -> str:
    auth = OAuth(
        url,
        credentials=ClientCredentials(client_id, client_secret),
        grant=ClientCredentialsGrant(scopes=[scope]),
        storage=MemoryStorage(),  # nothing kept between runs
    )
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool(tool, {})
        return "".join(part.text for part in result.content if isinstance(part, TextContent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/mcp")
    parser.add_argument("--credentials", type=Path, required=True)
    parser.add_argument("--tool", default="list_notes")
    parser.add_argument("--scope", default="notes:read")
    args = parser.parse_args()
    stored = json.loads(args.credentials.read_text())
    print(
        anyio.run(
            call, args.url, stored["client_id"], stored["client_secret"], args.tool, args.scope
        )
    )


if __name__ == "__main__":
    main()
