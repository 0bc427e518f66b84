"""The mcpauth authorization server: ``create_app(settings)`` returns a Starlette app."""

from mcpauth.server.app import create_app
from mcpauth.server.config import Settings, load_settings

__all__ = ["Settings", "create_app", "load_settings"]
