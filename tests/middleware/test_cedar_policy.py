"""``CedarPolicy`` on its own (docs/security.md T44): one group may call a tool and another may
not; a rule reads a call argument; a policy that does not parse names its line and column; an
error while evaluating denies, whatever the other rules say; caller input never becomes a Cedar
entity; ``tools/list`` hides only a tool denied whatever the arguments."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

import mcpauth.middleware.cedar
from mcpauth.errors import ConfigurationError
from mcpauth.middleware import CedarPolicy, PolicySyntaxError, ToolCall, ToolCaller, ToolDecision

POLICY = """\
// engineers deploy to staging only; operators anywhere
@id("engineers-deploy-to-staging")
permit(principal in Group::"engineers", action == Action::"tools/call", resource == Tool::"deploy")
  when { context.arguments.env == "staging" };
permit(principal in Group::"operators", action, resource == Tool::"deploy");

// everyone reads, but secrets only with a DPoP-bound token
permit(principal, action, resource == Tool::"read");
forbid(principal, action, resource == Tool::"read")
  when { context.arguments has secret && context.arguments.secret && !principal.dpop_bound };

// the admin tool: the admin scope, and never for the bot client
permit(principal, action, resource == Tool::"admin") when { principal.scopes.contains("admin") };
forbid(principal, action, resource == Tool::"admin") when { principal.client_id == "bot" };
"""

ENGINEER = ToolCaller("alice", "app", groups=frozenset({"engineers"}))
OPERATOR = ToolCaller("bob", "app", groups=frozenset({"operators"}))
STRANGER = ToolCaller("carol", "app")


@pytest.fixture(scope="module")
def policy() -> CedarPolicy:
    return CedarPolicy(POLICY, source="tools.cedar")


def allowed(policy: CedarPolicy, caller: ToolCaller, tool: str, **arguments: object) -> bool:
    decision = policy(caller, ToolCall(tool, arguments))
    assert isinstance(decision, ToolDecision)
    return decision.allowed


def test_one_group_may_call_a_tool_and_another_may_not(policy: CedarPolicy) -> None:
    assert allowed(policy, OPERATOR, "deploy", env="production")
    assert allowed(policy, ENGINEER, "deploy", env="staging")
    assert not allowed(policy, STRANGER, "deploy", env="staging")
    assert not allowed(policy, OPERATOR, "unknown-tool")  # no permit: denied


def test_a_rule_on_a_call_argument_decides_the_call(policy: CedarPolicy) -> None:
    assert allowed(policy, ENGINEER, "deploy", env="staging")
    assert not allowed(policy, ENGINEER, "deploy", env="production")
    assert allowed(policy, STRANGER, "read", path="/a")
    assert not allowed(policy, STRANGER, "read", path="/a", secret=True)
    bound = ToolCaller("carol", "app", dpop_bound=True)
    assert allowed(policy, bound, "read", path="/a", secret=True)


def test_the_principal_carries_client_scopes_and_binding(policy: CedarPolicy) -> None:
    admin = ToolCaller("dana", "app", scopes=frozenset({"admin", "files"}))
    bot = ToolCaller("dana", "bot", scopes=frozenset({"admin"}))
    assert allowed(policy, admin, "admin")
    assert not allowed(policy, bot, "admin")  # the forbid on the client wins
    assert not allowed(policy, STRANGER, "admin")
    without_subject = ToolCaller(None, "app", scopes=frozenset({"admin"}))  # Client::"app"
    assert allowed(policy, without_subject, "admin")


def test_an_evaluation_error_denies_whatever_the_other_rules_say(
    policy: CedarPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    # the engineers' rule reads env, which this call lacks: an error, and the call is denied
    with caplog.at_level(logging.WARNING, "mcpauth.middleware"):
        assert not allowed(policy, ENGINEER, "deploy")
    assert "could not evaluate a call of 'deploy'" in caplog.text
    assert "does not have the attribute `env`" in caplog.text
    # a forbid that fails to evaluate denies too, where Cedar alone would skip it and allow
    assert not allowed(policy, STRANGER, "read", secret="yes")  # `&&` on a string: an error
    both = ToolCaller("erin", "app", groups=frozenset({"engineers", "operators"}))
    assert allowed(policy, both, "deploy", env="staging")
    assert not allowed(policy, both, "deploy")  # the operators' permit holds, the error denies


@pytest.mark.parametrize(
    "arguments",
    [
        {"owner": {"__entity": {"type": "User", "id": "alice"}}},
        {"n": {"__extn": {"fn": "decimal", "arg": "1.0"}}},
        {"deep": [{"__expr": "x"}]},
    ],
)
def test_arguments_that_cedar_would_read_as_entities_or_extensions_deny(
    arguments: dict[str, object],
) -> None:
    policy = CedarPolicy("permit(principal, action, resource);")  # allows every other call
    decision = policy(STRANGER, ToolCall("any", arguments))
    assert decision == ToolDecision(False, "The call's arguments cannot be checked")


def test_an_argument_cannot_name_the_principal_as_an_entity() -> None:
    policy = CedarPolicy(
        "permit(principal, action, resource) when { context.arguments.owner == principal };"
    )
    forged = {"owner": {"__entity": {"type": "User", "id": "carol"}}}
    assert not policy(STRANGER, ToolCall("transfer", forged)).allowed
    assert not policy(STRANGER, ToolCall("transfer", {"owner": "carol"})).allowed


def test_json_values_cedar_lacks_are_converted() -> None:
    policy = CedarPolicy(
        """permit(principal, action, resource == Tool::"a") when {
             context.arguments.ratio == "0.5" && context.arguments.whole == 2
             && context.arguments.huge == "99999999999999999999999"
             && !(context.arguments has gone) && context.arguments.tags.contains("x")
             && context.arguments.tags.containsAll(["x", "y"])
           };"""
    )
    arguments = {
        "ratio": 0.5,
        "whole": 2.0,
        "huge": 99999999999999999999999,
        "gone": None,
        "tags": ["x", None, "y", "x"],
    }
    assert policy(STRANGER, ToolCall("a", arguments)).allowed


def test_the_groups_come_from_the_claim_named() -> None:
    policy = CedarPolicy(
        'permit(principal in Group::"staff", action, resource);', groups_claim="roles"
    )
    caller = ToolCaller("f", "app", claims={"roles": ["staff"], "groups": ["other"]})
    assert policy(caller, ToolCall("t", {})).allowed
    assert not CedarPolicy('permit(principal in Group::"staff", action, resource);')(
        caller, ToolCall("t", {})
    ).allowed


def test_listing_hides_only_a_tool_denied_whatever_the_arguments(policy: CedarPolicy) -> None:
    tools = ["deploy", "read", "admin", "unknown"]
    # the engineers' deploy depends on env: shown (each call is decided with its arguments)
    assert policy.visible(ENGINEER, tools) == {"deploy", "read"}
    assert policy.visible(OPERATOR, tools) == {"deploy", "read"}
    assert policy.visible(STRANGER, tools) == {"read"}  # no rule could permit deploy
    bot = ToolCaller("g", "bot", scopes=frozenset({"admin"}))
    assert policy.visible(bot, tools) == {"read"}  # a forbid that holds for every call
    assert policy.visible(STRANGER, []) == set()
    # one tool asked through the hook itself: arguments=None
    assert policy(ENGINEER, ToolCall("deploy")).allowed
    assert not policy(STRANGER, ToolCall("deploy")).allowed


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        (POLICY.replace('"staging" };', '"staging" ;'), 4, 45, "unexpected token `;`"),
        ('permit(principal, action, resource);\n\npermt(principal, action, resource);', 3, 1,
         "invalid policy effect: permt"),
        ("permit(principal, action, resource)\n  when { x };", 2, 10, "invalid variable: x"),
        ('// a comment; with a semicolon\npermit(principal, action, resource) when {\n'
         '  context.arguments.p == "open };', 3, 26, "invalid token"),
        ("permit(principal, action,", 1, 26, "unexpected end of input"),
        ('forbid(principal, action, resource)\n  unless { principal.scopes.contains(1, 2) };',
         2, 29, "call to `contains` requires exactly 1 argument"),
    ],
)  # fmt: skip
def test_a_policy_that_does_not_parse_names_its_line_and_column(
    text: str, line: int, column: int, message: str
) -> None:
    with pytest.raises(PolicySyntaxError) as raised:
        CedarPolicy(text, source="tools.cedar")
    error = raised.value
    assert (error.source, error.line, error.column) == ("tools.cedar", line, column)
    assert error.message.startswith(message)
    assert str(error).startswith(f"tools.cedar:{line}:{column}: {message}")
    assert isinstance(error, ValueError)


def test_a_policy_file_is_read_and_its_errors_name_the_file(tmp_path: Path) -> None:
    good = tmp_path / "tools.cedar"
    good.write_text(POLICY, encoding="utf-8")
    assert CedarPolicy.from_file(good).source == str(good)
    bad = tmp_path / "bad.cedar"
    bad.write_text("permit(principal, action, resource)\nwhen { ;", encoding="utf-8")
    with pytest.raises(PolicySyntaxError, match=rf"^{bad}:2:8: unexpected token"):
        CedarPolicy.from_file(bad)
    with pytest.raises(FileNotFoundError):
        CedarPolicy.from_file(tmp_path / "missing.cedar")


def test_an_empty_policy_denies_every_call() -> None:
    empty = CedarPolicy("// nothing yet\n")
    assert not empty(STRANGER, ToolCall("read", {})).allowed
    assert empty.visible(STRANGER, ["read"]) == set()


def test_without_cedarpy_a_policy_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cedarpy", None)  # import cedarpy raises ImportError
    with pytest.raises(ConfigurationError, match=r"mcpauth-kit\[policy\]"):
        mcpauth.middleware.cedar.CedarPolicy("permit(principal, action, resource);")


def test_a_middleware_without_a_cedar_policy_never_imports_cedarpy() -> None:
    code = (
        "import sys\n"
        "from mcpauth.middleware import Limits, ProtectedResourceMiddleware, Rate\n"
        "ProtectedResourceMiddleware(lambda *a: None, resource='https://r.example/mcp',\n"
        "    authorization_servers=['https://as.example'], limits=Limits(user_rate=Rate(5)),\n"
        "    tool_policy=lambda caller, call: True)\n"
        "print('cedarpy' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False"]


def test_the_parsed_principals_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcpauth.middleware.cedar, "ENTITY_CACHE_SIZE", 2)
    policy = CedarPolicy("permit(principal, action, resource);")
    for subject in ("a", "b", "c", "a"):
        assert policy(ToolCaller(subject, "app"), ToolCall("t", {})).allowed
    assert len(policy._entities) == 2
