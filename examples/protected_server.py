"""An MCP server (the official MCP Python SDK) made a protected resource by wrapping its app in
mcpauth's middleware: RFC 9728 metadata, 401 challenges, only tokens issued for this URL.

    python examples/protected_server.py --port 8000 --issuer http://127.0.0.1:9000
"""

from __future__ import annotations

import argparse

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import MCPServer

from mcpauth.middleware import ProtectedResource, ProtectedResourceMiddleware, ScopePolicy


def build(resource: str, issuer: str) -> ProtectedResourceMiddleware:
    mcp = MCPServer("notes")
    notes = ["buy milk", "write the report"]

    @mcp.tool()
    def list_notes() -> str:
        """The caller's notes, and who the caller is."""
        token = get_access_token()  # set by the middleware for every verified request
        caller = token.client_id if token is not None else "nobody"
        return f"{caller}: " + "; ".join(notes)

    @mcp.tool()
    def add_note(text: str) -> str:
        """Add a note (needs notes:write)."""
        notes.append(text)
        return "added"

    return ProtectedResourceMiddleware(
        mcp.streamable_http_app(),
        # this server's URL, as registered with the authorization server
        resource=ProtectedResource(
            resource, name="Example notes server", scopes_supported=["notes:read", "notes:write"]
        ),
        authorization_servers=[issuer],
        policy=ScopePolicy(required="notes:read", tools={"add_note": "notes:write"}),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--issuer", default="http://127.0.0.1:9000")
    args = parser.parse_args()
    resource = f"http://127.0.0.1:{args.port}/mcp"
    uvicorn.run(build(resource, args.issuer), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
