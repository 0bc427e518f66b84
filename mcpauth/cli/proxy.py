"""``mcpauth proxy``: its parser and handler come from the middleware extra; without it the
command says what to install."""

from __future__ import annotations

from typing import Any

from mcpauth.cli._shared import missing_extra

COMMANDS = ("proxy",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    try:
        from mcpauth.proxy.cli import add_proxy_parser
    except ImportError as exc:
        missing_extra(sub, ["proxy"], "middleware", exc)
    else:
        add_proxy_parser(sub)
