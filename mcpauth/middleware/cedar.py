"""Per-tool rules in the Cedar policy language (``cedarpy``, the ``policy`` extra): the built-in
:data:`~mcpauth.middleware.ToolPolicy`.

The entities, without a schema:

- principal ``User::"<sub>"`` (``Client::"<client_id>"`` for a token without a subject), a
  member (``in``) of ``Group::"<name>"`` for each of the token's groups, with the attributes
  ``client_id`` (string), ``scopes`` (set of strings), ``dpop_bound`` (bool) and, when the
  token names one, ``issuer`` (string);
- action ``Action::"tools/call"``;
- resource ``Tool::"<name>"``;
- context ``{arguments: <the call's arguments>}``: a JSON object as a Cedar record. A ``null``
  is left out (a member that is ``null`` is absent: ``has`` is false), a number that is not
  whole, or beyond Cedar's 64-bit integers, becomes the string of its value, a list becomes a
  set. An object with a member Cedar reserves (``__entity``, ``__extn``, ``__expr``) would turn
  caller input into an entity or an extension value: such a call is denied.

A call is allowed when a ``permit`` holds and no ``forbid`` does, as Cedar decides; and an error
while evaluating any rule (a missing argument read without ``has``, a type mismatch) denies the
call, whatever the other rules say, and is logged (no token is ever in the log).

``tools/list``: each tool is evaluated with a context that has no ``arguments``, so every rule
that reads them fails to evaluate. A tool is hidden when Cedar denies it and either a ``forbid``
holds or no rule failed: it is then denied whatever the arguments. A tool that some rule on the
arguments may still allow is shown (its calls are decided with their arguments). Test the
arguments with ``context.arguments.<name>`` or ``context.arguments has <name>``; never with
``context has arguments``, which is true on every call and false only while listing.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson

from mcpauth.errors import ConfigurationError
from mcpauth.middleware.tool_policy import ToolCall, ToolCaller, ToolDecision, claimed_groups

__all__ = ["CedarPolicy", "PolicySyntaxError"]

logger = logging.getLogger("mcpauth.middleware")

_ACTION = {"type": "Action", "id": "tools/call"}
_RESERVED = frozenset({"__entity", "__extn", "__expr"})
_LONG = 2**63
_LISTING = "{}"  # the context of a tools/list question: no arguments
ENTITY_CACHE_SIZE = 1024  # principals whose parsed entities are kept (parsing is most of a call)
# Cedar's lexemes, enough to find where a parse error is (cedarpy does not say)
_LEXEME = re.compile(
    r"""(?P<space>\s+)
    | (?P<comment>//[^\n]*)
    | (?P<string>"(?:[^"\\]|\\.)*"?)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>[0-9]+)
    | (?P<op>==|!=|<=|>=|&&|\|\||::)
    | (?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)
_END_OF_INPUT = "unexpected end of input"
# the word an error names: "invalid variable: x", "call to `contains` requires ..."
_NAMED = re.compile(r": ([A-Za-z_][A-Za-z0-9_]*)$|`([A-Za-z_][A-Za-z0-9_]*)`")


class PolicySyntaxError(ValueError):
    """A policy that does not parse: ``source`` (the file), the ``line`` and ``column`` (from 1)
    where the error is, and Cedar's ``message``; ``str()`` is ``source:line:column: message``."""

    def __init__(self, source: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{source}:{line}:{column}: {message}")
        self.source = source
        self.line = line
        self.column = column
        self.message = message


class _Unrepresentable(ValueError):
    """Arguments that cannot be a Cedar context."""


def _cedarpy() -> Any:
    try:
        import cedarpy
    except ImportError as exc:
        raise ConfigurationError(
            "CedarPolicy needs the cedarpy package: pip install 'mcpauth-kit[policy]'"
        ) from exc
    return cedarpy


def _parse_error(cedarpy: Any, text: str) -> str | None:
    try:
        cedarpy.PolicySet.from_str(text)
    except ValueError as exc:
        return str(exc)
    return None


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _located(cedarpy: Any, text: str, statement: list[tuple[int, int]], message: str) -> int:
    """Where in ``statement`` (its lexemes) the error is: the first lexeme after which no
    text can make it parse, found by halving; or, for an error that only the whole statement
    shows (an unknown variable or effect), the word it names, else the statement's start."""
    low, high = 0, len(statement) - 1
    start = statement[0][0]
    while low < high:
        middle = (low + high) // 2
        error = _parse_error(cedarpy, text[start : statement[middle][1]])
        if error is not None and error != _END_OF_INPUT:
            high = middle
        else:
            low = middle + 1
    if message.startswith(("unexpected token", "invalid token")):
        return statement[low][0]
    if message == _END_OF_INPUT:
        return statement[-1][1]
    named = _NAMED.search(message)
    if named is not None:
        word = named[1] or named[2]
        for begin, end in statement:
            if text[begin:end] == word:
                return begin
    return start


def _parse(cedarpy: Any, text: str, source: str) -> Any:
    """The policy set of ``text``.

    Raises:
        PolicySyntaxError: it does not parse; where, as cedarpy does not say: the statements
            (up to each ``;``) are parsed one by one, and the failing one is searched.
    """
    try:
        return cedarpy.PolicySet.from_str(text)
    except ValueError as exc:
        whole = str(exc)
    lexemes = [m.span() for m in _LEXEME.finditer(text) if m.lastgroup not in ("space", "comment")]
    first = 0
    for index, (begin, end) in enumerate(lexemes):
        if text[begin:end] != ";" and index < len(lexemes) - 1:
            continue
        statement = lexemes[first : index + 1]
        first = index + 1
        message = _parse_error(cedarpy, text[statement[0][0] : end])
        if message is not None:
            line, column = _position(text, _located(cedarpy, text, statement, message))
            raise PolicySyntaxError(source, line, column, message)
    raise PolicySyntaxError(source, 1, 1, whole)  # no one statement fails: the set does


def _value(value: Any) -> Any:
    """A JSON value as Cedar's JSON takes it (see the module docstring)."""
    if isinstance(value, dict):
        if _RESERVED.intersection(value):
            raise _Unrepresentable("a member named " + ", ".join(sorted(_RESERVED & set(value))))
        return {key: _value(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_value(item) for item in value if item is not None]
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if -_LONG <= value < _LONG else str(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_LONG <= value < _LONG else repr(value)
    raise _Unrepresentable(type(value).__name__)


class CedarPolicy:
    """Tool calls decided by Cedar policies (the module docstring gives the entities).

    ``text`` is the policy set; ``source`` names it in errors (the file it came from);
    ``groups_claim`` is the token claim that holds the caller's groups (``groups``, what
    mcpauth's authorization server issues). Parsed once, here.

    Raises:
        PolicySyntaxError: the policies do not parse (the line and column of the error).
        ConfigurationError: the ``cedarpy`` package is not installed.
    """

    def __init__(self, text: str, *, source: str = "<policy>", groups_claim: str = "groups"):
        self._cedar = _cedarpy()
        self.source = source
        self.groups_claim = groups_claim
        self._policies = _parse(self._cedar, text, source)
        self._entities: dict[str, Any] = {}  # the principal as JSON -> cedarpy's parsed handle

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, groups_claim: str = "groups"
    ) -> CedarPolicy:
        """The policies of the file at ``path`` (UTF-8).

        Raises:
            PolicySyntaxError: they do not parse (``path:line:column: message``).
            OSError: the file cannot be read.
            ValueError: it is not UTF-8.
            ConfigurationError: the ``cedarpy`` package is not installed.
        """
        text = Path(path).read_text(encoding="utf-8")
        return cls(text, source=str(path), groups_claim=groups_claim)

    def _principal(self, caller: ToolCaller) -> tuple[dict[str, str], Any]:
        """The principal's uid and the entities (the principal alone), parsed by cedarpy once
        for the most recent callers."""
        if caller.subject is not None:
            uid = {"type": "User", "id": caller.subject}
        else:
            uid = {"type": "Client", "id": caller.client_id}
        attrs: dict[str, Any] = {
            "client_id": caller.client_id,
            "scopes": sorted(caller.scopes),
            "dpop_bound": caller.dpop_bound,
        }
        if caller.issuer is not None:
            attrs["issuer"] = caller.issuer
        groups = caller.groups
        if self.groups_claim != "groups":
            groups = claimed_groups(caller.claims, self.groups_claim)
        parents = [{"type": "Group", "id": group} for group in sorted(groups)]
        entity = orjson.dumps([{"uid": uid, "attrs": attrs, "parents": parents}]).decode()
        parsed = self._entities.get(entity)
        if parsed is None:
            if len(self._entities) >= ENTITY_CACHE_SIZE:
                del self._entities[next(iter(self._entities))]  # the oldest
            parsed = self._entities[entity] = self._cedar.Entities.from_json_str(entity)
        return uid, parsed

    def __call__(self, caller: ToolCaller, call: ToolCall) -> ToolDecision:
        """The decision on ``call`` (``arguments=None``: whether ``tools/list`` shows it)."""
        if call.arguments is None:
            return ToolDecision(bool(self.visible(caller, [call.name])))
        try:
            context = orjson.dumps({"arguments": _value(dict(call.arguments))}).decode()
        except (_Unrepresentable, RecursionError, TypeError) as exc:
            logger.warning("a call of %r denied: its arguments hold %s", call.name, exc)
            return ToolDecision(False, "The call's arguments cannot be checked")
        principal, entities = self._principal(caller)
        request = {
            "principal": principal,
            "action": _ACTION,
            "resource": {"type": "Tool", "id": call.name},
            "context": context,
        }
        result = self._cedar.is_authorized(request, self._policies, entities)
        errors = result.diagnostics.errors
        if errors:  # a rule that cannot be evaluated denies, whatever the others say
            logger.warning(
                "the Cedar policy could not evaluate a call of %r (denied): %s",
                call.name,
                "; ".join(errors),
            )
            return ToolDecision(False)
        return ToolDecision(bool(result.allowed))

    def visible(self, caller: ToolCaller, names: Collection[str]) -> set[str]:
        """The tools of ``names`` that ``tools/list`` shows ``caller`` (the module docstring)."""
        listed = list(names)
        if not listed:
            return set()
        principal, entities = self._principal(caller)
        requests = [
            {
                "principal": principal,
                "action": _ACTION,
                "resource": {"type": "Tool", "id": name},
                "context": _LISTING,
            }
            for name in listed
        ]
        results = self._cedar.is_authorized_batch(requests, self._policies, entities)
        allow, deny = self._cedar.Decision.Allow, self._cedar.Decision.Deny
        return {
            name
            for name, result in zip(listed, results, strict=True)
            if result.decision == allow
            or (
                result.decision == deny
                and result.diagnostics.errors
                and not result.diagnostics.reasons
            )
        }
