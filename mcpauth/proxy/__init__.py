"""``mcpauth proxy``: protect an MCP server written in any language, built on
:mod:`mcpauth.middleware`.

    from mcpauth.middleware import ProtectedResourceMiddleware
    from mcpauth.proxy import CORSGrant, UpstreamProxy

    proxy = UpstreamProxy("http://127.0.0.1:3000/mcp", path="/mcp")
    app = CORSGrant(ProtectedResourceMiddleware(proxy, ...), proxy)

:class:`UpstreamProxy` forwards to an HTTP upstream with the caller's identity in headers
(:class:`IdentityHeaders`), :class:`StdioBridge` runs a stdio server per MCP session; the
command line is :mod:`mcpauth.proxy.cli`. Needs the ``middleware`` extra (and the MCP SDK for
a stdio server). Imports nothing from ``mcpauth.server``; the middleware never imports this.
"""

from mcpauth.proxy.stdio import StdioBridge
from mcpauth.proxy.upstream import CORSGrant, IdentityHeaders, UpstreamProxy

__all__ = ["CORSGrant", "IdentityHeaders", "StdioBridge", "UpstreamProxy"]
