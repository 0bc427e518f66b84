"""`mcpauth` builds the parser of the one command group its command line names (building the
proxy's imports the middleware, which `mcpauth token` does not need), and the full parser for
help and anything it does not know."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from mcpauth import cli


def commands(parser: argparse.ArgumentParser) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def every_command() -> set[str]:
    return {name for group in cli.GROUPS for name in group.COMMANDS}


@pytest.mark.parametrize("group", cli.GROUPS, ids=lambda group: group.__name__)
def test_each_group_adds_the_commands_it_declares(group: Any) -> None:
    parser = argparse.ArgumentParser()
    group.add_parser(parser.add_subparsers(dest="command"))
    assert commands(parser) == set(group.COMMANDS)


@pytest.mark.parametrize("command", sorted({"serve", "token", "login", "logout", "proxy", "db"}))
def test_a_command_line_gets_the_parser_of_its_group_only(command: str) -> None:
    group = next(group for group in cli.GROUPS if command in group.COMMANDS)
    assert commands(cli.build_parser([command, "x"])) == set(group.COMMANDS)


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"], ["no-such-command"], ["--x", "token"]])
def test_help_and_unknown_command_lines_get_every_group(argv: list[str]) -> None:
    assert commands(cli.build_parser(argv)) == every_command()


def test_an_unknown_command_is_still_refused_with_the_list_of_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["no-such-command"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'no-such-command'" in error
    assert all(name in error for name in every_command())
