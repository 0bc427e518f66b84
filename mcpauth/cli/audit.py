"""``mcpauth audit search``: the audit events kept in the database (``audit_retention``)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from mcpauth.cli._shared import CommandError, admin_group, open_admin, print_json

COMMANDS = ("audit",)  # the commands add_parser adds


def add_parser(sub: Any) -> None:
    with admin_group(sub, "audit", "the audit log kept for searching", cmd_audit) as actions:
        search = actions.add_parser("search", help="search the audit events, newest first")
        search.add_argument("--user", metavar="NAME_OR_ID", help="events naming this user")
        search.add_argument("--client", metavar="CLIENT_ID", help="events naming this client")
        search.add_argument(
            "--event", metavar="EVENT", help="an event (admin.user_added) or a prefix (admin.)"
        )
        search.add_argument(
            "--since", metavar="TIME", help="from this time: ISO 8601 or seconds since the epoch"
        )
        search.add_argument(
            "--until", metavar="TIME", help="up to this time: ISO 8601 or seconds since the epoch"
        )
        search.add_argument("--limit", type=int, default=100, help="at most this many (500)")


def parse_time(text: str | None, flag: str) -> int | None:
    """Seconds since the epoch from ``text`` (ISO 8601, UTC unless it says otherwise, or a
    number), None when absent.

    Raises:
        CommandError: not a time.
    """
    if not text:
        return None
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(
            f"{flag}: not a time (2026-11-26, 2026-11-26T14:00 or seconds): {text!r}"
        ) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp())


def cmd_audit(args: argparse.Namespace) -> int:
    from mcpauth.server import admin

    since = parse_time(args.since, "--since")
    until = parse_time(args.until, "--until")
    if not 1 <= args.limit <= 500:
        raise CommandError("--limit: 1 to 500")
    ctx = open_admin(args)
    print_json(
        admin.search_audit(
            ctx,
            user=args.user,
            client=args.client,
            event=args.event,
            since=since,
            until=until,
            limit=args.limit,
        )
    )
    return 0
