"""The mcpauth authorization server: ``create_app(settings)`` returns a Starlette app;
:class:`Admin` manages its users, resources, clients and keys from Python."""

from mcpauth.server.admin import Admin, AdminError
from mcpauth.server.app import create_app
from mcpauth.server.config import Settings, load_settings

__all__ = ["Admin", "AdminError", "Settings", "create_app", "load_settings"]
