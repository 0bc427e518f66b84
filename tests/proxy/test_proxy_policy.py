"""``mcpauth proxy --policy FILE.cedar --user-rate-limit RATE --tool-rate-limit TOOL=RATE``: the
options reach the middleware; a policy file that does not parse stops the command with exit
status 2 and its line and column; a rate that is not one is a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpauth.middleware import CedarPolicy, ProtectedResourceMiddleware, Rate
from mcpauth.proxy.cli import build_proxy_app, run_proxy
from tests.middleware.helpers import ISSUER, RESOURCE

from .test_proxy import parse

BASE = [
    "--resource",
    RESOURCE,
    "--authorization-server",
    ISSUER,
    "--upstream",
    "http://127.0.0.1:9",
]


def middleware_of(argv: list[str]) -> ProtectedResourceMiddleware:
    app = build_proxy_app(parse([*BASE, *argv]))
    middleware = getattr(app, "app", app)
    assert isinstance(middleware, ProtectedResourceMiddleware)
    return middleware


def test_the_policy_and_the_tool_limits_reach_the_middleware(tmp_path: Path) -> None:
    policy = tmp_path / "tools.cedar"
    policy.write_text('permit(principal in Group::"staff", action, resource);\n')
    middleware = middleware_of(
        [
            "--policy", str(policy), "--groups-claim", "roles",
            "--user-rate-limit", "100/min",
            "--tool-rate-limit", "search=10/30s:2", "--tool-rate-limit", "*=60/h",
        ]
    )  # fmt: skip
    limits = middleware.limits
    assert limits.user_rate == Rate(100, 60.0)
    assert dict(limits.tool_rates or {}) == {"search": Rate(10, 30.0, 2), "*": Rate(60, 3600.0)}
    tool_calls = middleware._tool_calls
    assert tool_calls is not None
    assert isinstance(tool_calls.policy, CedarPolicy)
    assert tool_calls.policy.groups_claim == "roles"
    assert tool_calls.policy.source == str(policy)
    plain = middleware_of([])
    assert plain._tool_calls is None
    assert (plain.limits.user_rate, plain.limits.tool_rates) == (None, None)


def test_a_policy_that_does_not_parse_stops_the_proxy_with_its_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "tools.cedar"
    policy.write_text(
        'permit(principal, action, resource == Tool::"read");\n'
        'permit(principal in Group::"staff", action resource);\n'
    )
    assert run_proxy(parse([*BASE, "--policy", str(policy)])) == 2
    error = capsys.readouterr().err
    assert error == f"mcpauth proxy: {policy}:2:44: unexpected token `resource`\n"
    assert run_proxy(parse([*BASE, "--policy", str(tmp_path / "missing.cedar")])) == 2
    assert "missing.cedar" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--user-rate-limit", "100"], "expected a rate such as 60/min"),
        (["--user-rate-limit", "0/min"], "a rate's calls and burst must be at least 1"),
        (["--tool-rate-limit", "search"], "expected TOOL=RATE"),
        (["--tool-rate-limit", "=10/min"], "expected TOOL=RATE"),
        (["--tool-rate-limit", "search=10/fortnight"], "expected a rate such as 60/min"),
    ],
)
def test_a_rate_that_is_not_one_is_a_usage_error(
    option: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse([*BASE, *option])
    assert f"argument {option[0]}: {message}" in capsys.readouterr().err
