"""``mcpauth login | token | logout``: their parsers and handlers are the client helper's own
(:mod:`mcpauth.client.cli`, which needs no server); without the client extra the commands
say what to install."""

from __future__ import annotations

from typing import Any

from mcpauth.cli._shared import missing_extra

COMMANDS = ("login", "token", "logout")  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    try:
        from mcpauth.client.cli import add_client_parsers
    except ImportError as exc:
        missing_extra(sub, ["login", "token", "logout"], "client", exc)
    else:
        add_client_parsers(sub)
