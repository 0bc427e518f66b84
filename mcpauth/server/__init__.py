"""The mcpauth authorization server: ``create_app(settings)`` returns a Starlette app;
:class:`Admin` manages its users, resources, clients and keys from Python; a
:class:`SignInStep` of your own replaces the built-in sign-in (``create_app(settings,
sign_in=...)``)."""

from mcpauth.server.admin import Admin, AdminError
from mcpauth.server.admin_results import (
    ClientInfo,
    ClientListing,
    KeyInfo,
    ResourceInfo,
    RotatedKey,
    UserInfo,
    UserListing,
)
from mcpauth.server.app import create_app
from mcpauth.server.browser.sign_in_step import (
    Account,
    PasswordAndProviders,
    PendingSignIn,
    SignInStep,
)
from mcpauth.server.config import Settings, load_settings

__all__ = [
    "Account",
    "Admin",
    "AdminError",
    "ClientInfo",
    "ClientListing",
    "KeyInfo",
    "PasswordAndProviders",
    "PendingSignIn",
    "ResourceInfo",
    "RotatedKey",
    "Settings",
    "SignInStep",
    "UserInfo",
    "UserListing",
    "create_app",
    "load_settings",
]
