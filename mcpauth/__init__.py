"""mcpauth: OAuth 2.1 authorization for MCP servers.

Import from the subpackages: ``mcpauth.server``, ``mcpauth.middleware``, ``mcpauth.client``.
"""

__version__ = "0.1.0"
