"""The protected demo MCP server of docker/compose.yaml: the tools of `mcpauth demo` (official MCP
Python SDK, streamable HTTP) behind mcpauth's protected-resource middleware.

    MCPAUTH_RESOURCE              canonical URL of this server (default http://localhost:8000/mcp)
    MCPAUTH_AUTHORIZATION_SERVER  issuer of the tokens it accepts (default http://localhost:9000)
    MCP_HOST, MCP_PORT            where to listen (default 127.0.0.1:8000; the image: 0.0.0.0)
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import uvicorn

from mcpauth.demo import protected_demo_app


def main() -> None:
    resource = os.environ.get("MCPAUTH_RESOURCE", "http://localhost:8000/mcp")
    issuer = os.environ.get("MCPAUTH_AUTHORIZATION_SERVER", "http://localhost:9000")
    app = protected_demo_app(resource, issuer)
    port = int(os.environ.get("MCP_PORT", urlsplit(resource).port or 8000))
    uvicorn.run(app, host=os.environ.get("MCP_HOST", "127.0.0.1"), port=port, server_header=False)


if __name__ == "__main__":
    main()
