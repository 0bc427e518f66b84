"""Each ``tools/call`` decided before the application sees it: the tool policy
(``tool_policy=``, :mod:`mcpauth.middleware.tool_policy`), then the per-user and per-tool limits
(``Limits.user_rate``, ``Limits.tool_rates``). Built only when one of them is configured.

A refusal is a JSON-RPC error with the call's ``id``, which an MCP client hands to the pending
call and shows:

- denied by the policy: HTTP 200, code ``-32003``, "Calling the tool 'x' is not allowed" (and
  the policy's reason). Not 403 ``insufficient_scope``: no other token would do (the scopes are
  checked before, with their own 403 and step-up), and a client that re-authorizes on a 403
  would loop; MCP has authorization failures of a call within a session answered as JSON-RPC
  errors.
- over a limit: HTTP 429 with ``Retry-After``, code ``-32000``, a message naming the limit and
  the seconds to wait; 503 with ``Retry-After`` when shared limits cannot be reached.

In a batch every request is answered: the refused call with its reason, the others as not
processed. Policies are asked first, for every call, so a call the policy refuses takes nothing
from the limits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from mcpauth.middleware._rate_limits import SERVER_BUSY
from mcpauth.middleware._token_buckets import ToolLimiter
from mcpauth.middleware.tool_policy import (
    ToolCall,
    ToolCaller,
    ToolPolicy,
    decide,
    visible_tools,
)
from mcpauth.middleware.verifier import VerifiedToken

__all__ = ["POLICY_DENIED", "Refusal", "ToolCalls", "visible"]

POLICY_DENIED = -32003  # JSON-RPC: an implementation-defined server error (-32000 to -32099)
NOT_PROCESSED = "Not processed: another request of this batch was refused"
SHOWN_NAME = 64  # the characters of a tool name repeated in a message
Refusal = tuple[int, Any, list[tuple[str, str]]]  # status, JSON body, headers

Message = Mapping[str, Any]


def _shown(name: str) -> str:
    return repr(name if len(name) <= SHOWN_NAME else name[:SHOWN_NAME] + "…")


def _answer(messages: Sequence[Message], refused: Message, code: int, text: str) -> Any:
    """The JSON-RPC answer: the error for ``refused``, and in a batch one for every other
    request too."""

    def error(message: Message, code: int, text: str) -> dict[str, Any]:
        failure = {"code": code, "message": text}
        return {"jsonrpc": "2.0", "id": message.get("id"), "error": failure}

    if len(messages) == 1:
        return error(refused, code, text)
    return [
        error(m, code, text) if m is refused else error(m, SERVER_BUSY, NOT_PROCESSED)
        for m in messages
        if "id" in m
    ]


def _call(message: Message) -> tuple[str | None, Mapping[str, Any] | None]:
    """The tool name and arguments of a ``tools/call`` (``None`` for what is not there or not
    of the right type; no arguments are ``{}``)."""
    params = message.get("params")
    if not isinstance(params, dict):
        return None, None
    name, arguments = params.get("name"), params.get("arguments")
    if arguments is None:
        arguments = {}
    return (
        name if isinstance(name, str) else None,
        MappingProxyType(arguments) if isinstance(arguments, dict) else None,
    )


class ToolCalls:
    """The tool policy and the tool-call limits of one middleware (either may be ``None``)."""

    def __init__(self, policy: ToolPolicy | None, limiter: ToolLimiter | None) -> None:
        self.policy = policy
        self.limiter = limiter

    async def refusal(self, token: VerifiedToken, messages: Sequence[Message]) -> Refusal | None:
        """``None`` when every ``tools/call`` of ``messages`` may go on (the limits' tokens
        taken), else the answer that refuses the request."""
        calls = [m for m in messages if m.get("method") == "tools/call"]
        if not calls:
            return None
        if self.policy is not None:
            denied = await _denied(self.policy, ToolCaller.of(token), calls)
            if denied is not None:
                message, text = denied
                return 200, _answer(messages, message, POLICY_DENIED, text), []
        if self.limiter is not None:
            user = token.subject if token.subject is not None else token.client_id
            for message in calls:
                name, _ = _call(message)
                if name is None:
                    continue  # the application refuses it (invalid params)
                refused = await self.limiter.refusal(token.issuer, user, name)
                if refused is not None:
                    status, which, retry_after = refused
                    text = _too_many(status, which, name, retry_after)
                    body = _answer(messages, message, SERVER_BUSY, text)
                    return status, body, [("Retry-After", retry_after)]
        return None


async def _denied(
    policy: ToolPolicy, caller: ToolCaller, calls: Sequence[Message]
) -> tuple[Message, str] | None:
    """The first call ``policy`` denies, and the message that says so."""
    for message in calls:
        name, arguments = _call(message)
        if name is None or arguments is None:  # nothing the policy could decide on
            return message, "The tool call has no tool name or its arguments are no object"
        decision = await decide(policy, caller, ToolCall(name, arguments))
        if not decision.allowed:
            text = f"Calling the tool {_shown(name)} is not allowed"
            return message, text + (f": {decision.reason}" if decision.reason else "")
    return None


def visible(
    token: VerifiedToken, scoped: Callable[[str], bool] | None, policy: ToolPolicy | None
) -> Callable[[Collection[str]], Awaitable[Collection[str]]]:
    """What ``tools/list`` shows the caller of ``token``: the tools ``scoped`` allows (when
    given: the per-tool scopes it holds) that ``policy`` (when given) does not hide."""

    async def shown(names: Collection[str]) -> Collection[str]:
        kept = [name for name in names if scoped is None or scoped(name)]
        if policy is None or not kept:
            return kept
        return await visible_tools(policy, ToolCaller.of(token), kept)

    return shown


def _too_many(status: int, which: str, name: str, retry_after: str) -> str:
    if status != 429:
        return which  # the message of a refusal that is not a limit's
    if which == "user":
        return f"Too many tool calls; retry after {retry_after} seconds"
    return f"Too many calls of the tool {_shown(name)}; retry after {retry_after} seconds"
