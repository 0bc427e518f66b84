"""The mcpauth authorization server: ``create_app(settings)`` returns a Starlette app;
:class:`Admin` manages its users, resources, clients and keys from Python; a
:class:`SignInStep` of your own replaces the built-in sign-in (``create_app(settings,
sign_in=...)``).

Each name is imported from its module when first used, so a process that needs one part
(``mcpauth serve`` the application, ``mcpauth users`` the administrative API) does not load
the other."""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from mcpauth.server.admin import Admin, AdminError
    from mcpauth.server.admin_results import (
        AuditEntry,
        ClientInfo,
        ClientListing,
        KeyInfo,
        MfaReset,
        ResourceInfo,
        RotatedKey,
        SessionInfo,
        UserGrant,
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
    "AuditEntry",
    "ClientInfo",
    "ClientListing",
    "KeyInfo",
    "MfaReset",
    "PasswordAndProviders",
    "PendingSignIn",
    "ResourceInfo",
    "RotatedKey",
    "SessionInfo",
    "Settings",
    "SignInStep",
    "UserGrant",
    "UserInfo",
    "UserListing",
    "create_app",
    "load_settings",
]

_HOMES = {
    "Account": "mcpauth.server.browser.sign_in_step",
    "Admin": "mcpauth.server.admin",
    "AdminError": "mcpauth.server.admin",
    "AuditEntry": "mcpauth.server.admin_results",
    "ClientInfo": "mcpauth.server.admin_results",
    "ClientListing": "mcpauth.server.admin_results",
    "KeyInfo": "mcpauth.server.admin_results",
    "MfaReset": "mcpauth.server.admin_results",
    "PasswordAndProviders": "mcpauth.server.browser.sign_in_step",
    "PendingSignIn": "mcpauth.server.browser.sign_in_step",
    "ResourceInfo": "mcpauth.server.admin_results",
    "RotatedKey": "mcpauth.server.admin_results",
    "SessionInfo": "mcpauth.server.admin_results",
    "Settings": "mcpauth.server.config",
    "SignInStep": "mcpauth.server.browser.sign_in_step",
    "UserGrant": "mcpauth.server.admin_results",
    "UserInfo": "mcpauth.server.admin_results",
    "UserListing": "mcpauth.server.admin_results",
    "create_app": "mcpauth.server.app",
    "load_settings": "mcpauth.server.config",
}


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use and bound here from then on
    (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
