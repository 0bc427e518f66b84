"""The per-tool policy hook (``ProtectedResourceMiddleware(tool_policy=...)``): what decides each
``tools/call`` on who calls (:class:`ToolCaller`) and what is called (:class:`ToolCall`), and
which tools ``tools/list`` shows. A policy is any callable, plain or ``async``, that takes the
two and returns a :class:`ToolDecision` (or ``True``/``False``);
:class:`~mcpauth.middleware.CedarPolicy` is the built-in one, rules in the Cedar language.

Listing: ``tools/list`` asks the policy about each listed tool with ``arguments=None`` (the
arguments are not known yet) and hides the tools it denies. A policy should deny then only a
tool the caller may call with no arguments at all; every call is decided again with its
arguments, so hiding is a convenience, never the defence.

A policy that raises, or returns anything but a decision, denies (and is logged): a policy
error never lets a call through.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from mcpauth.middleware.verifier import VerifiedToken

__all__ = ["ToolCall", "ToolCaller", "ToolDecision", "ToolPolicy"]

logger = logging.getLogger("mcpauth.middleware")


@dataclass(frozen=True, slots=True)
class ToolCaller:
    """Who calls, from the verified token: ``subject`` (``sub``), ``client_id``, ``issuer``,
    ``groups`` (the token's ``groups`` claim, a list of names, as mcpauth's authorization server
    issues it to a resource that asks for it; empty without one), ``scopes``, ``dpop_bound``
    (the token is bound to a DPoP key, ``cnf.jkt``, whose proof came with this request) and
    every verified claim."""

    subject: str | None
    client_id: str
    issuer: str | None = None
    groups: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()
    dpop_bound: bool = False
    claims: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, token: VerifiedToken, *, groups_claim: str = "groups") -> ToolCaller:
        """The caller a verified token names; ``groups`` from the claim ``groups_claim`` (a list
        of strings, or one space-separated string; anything else is no group)."""
        claims = token.claims
        confirmation = claims.get("cnf")
        return cls(
            subject=token.subject,
            client_id=token.client_id,
            issuer=token.issuer,
            groups=claimed_groups(claims, groups_claim),
            scopes=frozenset(token.scopes),
            dpop_bound=isinstance(confirmation, dict) and isinstance(confirmation.get("jkt"), str),
            claims=claims,
        )


def claimed_groups(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    """The group names of the claim ``name``: a list of strings or one space-separated string
    (anything else, or no such claim: none)."""
    value = claims.get(name)
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str))
    return frozenset()


@dataclass(frozen=True, slots=True)
class ToolCall:
    """What is called: the tool's ``name`` and the ``arguments`` of the call (a JSON object;
    ``{}`` when the call has none), or ``None`` when ``tools/list`` asks whether to show it."""

    name: str
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """Allow or deny; a denial's ``reason`` is shown to the caller in the JSON-RPC error."""

    allowed: bool
    reason: str | None = None


PolicyResult: TypeAlias = ToolDecision | bool


class ToolPolicy(Protocol):
    """A tool policy: any callable, a function or an ``async`` one, that takes the
    :class:`ToolCaller` and the :class:`ToolCall` (``arguments=None`` while listing) and returns
    a :class:`ToolDecision`, or ``True`` to allow and ``False`` to deny."""

    def __call__(
        self, caller: ToolCaller, call: ToolCall, /
    ) -> PolicyResult | Awaitable[PolicyResult]: ...


DENIED = ToolDecision(False)


async def decide(policy: ToolPolicy, caller: ToolCaller, call: ToolCall) -> ToolDecision:
    """``policy``'s decision on ``call``; a denial when it raises or answers anything else."""
    try:
        outcome: Any = policy(caller, call)
        if inspect.isawaitable(outcome):
            outcome = await outcome
    except Exception:  # a policy of the operator's, any error: it denies, never allows
        logger.exception("the tool policy failed on a call of %r: denied", call.name)
        return DENIED
    if isinstance(outcome, ToolDecision):
        return outcome
    if isinstance(outcome, bool):
        return ToolDecision(outcome)
    logger.error("the tool policy answered %s, not a decision: denied", type(outcome).__name__)
    return DENIED


async def visible_tools(
    policy: ToolPolicy, caller: ToolCaller, names: Collection[str]
) -> Collection[str]:
    """The tools of ``names`` that ``tools/list`` shows ``caller``: those the policy does not
    deny without arguments (a policy with a ``visible(caller, names)`` method of its own, as
    :class:`~mcpauth.middleware.CedarPolicy` has, answers them all at once)."""
    batch = getattr(policy, "visible", None)
    if callable(batch):
        try:
            shown = batch(caller, names)
            return set(await shown if inspect.isawaitable(shown) else shown)
        except Exception:  # as a denial: nothing is shown that the policy could not decide
            logger.exception("the tool policy failed on a tools/list: every tool hidden")
            return set()
    return {name for name in names if (await decide(policy, caller, ToolCall(name))).allowed}
