"""Which scopes an MCP operation needs: scopes for the whole resource, per JSON-RPC method and
per tool, resource or prompt name, with hierarchies (``files:admin`` implies ``files:write``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from mcpauth.oauth import parse_scope

__all__ = ["MalformedRequest", "ScopePolicy", "parse_jsonrpc"]

ScopeSpec = str | Iterable[str]

# JSON-RPC method → the params member naming the target, and the table it is looked up in.
_TARGETS = {
    "tools/call": ("name", "tools"),
    "prompts/get": ("name", "prompts"),
    "resources/read": ("uri", "resources"),
    "resources/subscribe": ("uri", "resources"),
    "resources/unsubscribe": ("uri", "resources"),
}


class MalformedRequest(ValueError):
    """The body is not JSON, has duplicate keys, or is not a JSON-RPC message or batch."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # a member came more than once: say which
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise MalformedRequest(f"duplicate member {key!r}")
            seen.add(key)
    return result


# one decoder for every request (json.loads with a hook builds a new one per call)
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


def _text(body: bytes) -> str:
    """``body`` decoded as json.loads decodes bytes: UTF-8, -16 or -32 as the first bytes
    say. A body that opens with ``{`` or ``[`` and no NUL after it is UTF-8 (what
    ``json.detect_encoding`` concludes too), found without calling it."""
    if len(body) > 1 and body[0] in b"{[" and body[1]:
        return body.decode("utf-8", "surrogatepass")
    return body.decode(json.detect_encoding(body), "surrogatepass")


def parse_jsonrpc(body: bytes) -> list[dict[str, Any]]:
    """The messages of a JSON-RPC body (one message or a batch).

    Duplicate object members are refused so that this parser and the application's cannot
    disagree about which tool is called.

    Raises:
        MalformedRequest: not parseable as JSON-RPC.
    """
    try:
        document = _DECODER.decode(_text(body))
    except (ValueError, RecursionError) as exc:
        raise MalformedRequest(str(exc)) from exc
    messages = document if isinstance(document, list) else [document]
    if not messages or not all(isinstance(message, dict) for message in messages):
        raise MalformedRequest("not a JSON-RPC message or batch")
    return messages


def _as_set(spec: ScopeSpec) -> frozenset[str]:
    return frozenset(parse_scope(spec)) if isinstance(spec, str) else frozenset(spec)


def _table(rules: Mapping[str, ScopeSpec] | None) -> dict[str, frozenset[str]]:
    return {name: _as_set(spec) for name, spec in (rules or {}).items()}


class ScopePolicy:
    """Scopes each request needs, and whether granted scopes cover them.

    ``required`` applies to every request; ``methods`` to JSON-RPC methods (``"tools/list"``);
    ``tools`` and ``prompts`` to names in ``tools/call`` and ``prompts/get``; ``resources`` to
    URIs in ``resources/read`` and ``(un)subscribe``. ``implies`` maps a scope to the narrower
    scopes it grants, transitively.
    """

    def __init__(
        self,
        *,
        required: ScopeSpec = (),
        methods: Mapping[str, ScopeSpec] | None = None,
        tools: Mapping[str, ScopeSpec] | None = None,
        resources: Mapping[str, ScopeSpec] | None = None,
        prompts: Mapping[str, ScopeSpec] | None = None,
        implies: Mapping[str, ScopeSpec] | None = None,
    ) -> None:
        self.required = _as_set(required)
        self.methods = _table(methods)
        self.targets = {
            "tools": _table(tools),
            "resources": _table(resources),
            "prompts": _table(prompts),
        }
        self.implies = _table(implies)
        # True when a decision depends on the JSON-RPC body
        self.reads_body = bool(self.methods) or any(self.targets.values())
        # every scope some request may need
        self.named = self.required.union(
            *self.methods.values(), *(s for table in self.targets.values() for s in table.values())
        )

    def needed_for(self, messages: Iterable[Mapping[str, Any]]) -> frozenset[str]:
        """Every scope the messages need together (MCP RS-13, RS-14: all of them at once)."""
        needed = self.required
        for message in messages:
            method = message.get("method")
            if not isinstance(method, str):
                continue
            if method in self.methods:
                needed = needed | self.methods[method]
            target = _TARGETS.get(method)
            params = message.get("params")
            if target is None or not isinstance(params, dict):
                continue
            key, table = target
            name = params.get(key)
            rules = self.targets[table]
            if isinstance(name, str) and name in rules:
                needed = needed | rules[name]
        return needed

    def effective(self, granted: Iterable[str]) -> frozenset[str]:
        """``granted`` plus every scope they imply (MCP RS-16: hierarchies count)."""
        closure = set(granted)
        pending = list(closure)
        while pending:
            for narrower in self.implies.get(pending.pop(), frozenset()):
                if narrower not in closure:
                    closure.add(narrower)
                    pending.append(narrower)
        return frozenset(closure)

    def covers(self, granted: Iterable[str]) -> bool:
        """Whether ``granted`` (with what it implies) holds every scope the policy names: no
        request can then need more, whatever its body says."""
        if not self.implies:
            return self.named.issubset(granted)
        return self.named <= self.effective(granted)

    def missing(self, granted: Iterable[str], needed: Iterable[str]) -> frozenset[str]:
        """The needed scopes that ``granted`` does not cover."""
        if not self.implies:
            return frozenset(needed).difference(granted)
        return frozenset(needed) - self.effective(granted)
