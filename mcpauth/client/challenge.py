"""``WWW-Authenticate`` parsing for Bearer challenges (RFC 6750 §3, RFC 9728 §5.1) and DPoP
challenges (RFC 9449 §7.1: the same parameters, plus ``algs``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from mcpauth.oauth import parse_scope

# token68 or auth-param: name = token / quoted-string (RFC 9110 §11.2)
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_PARAM = re.compile(rf"\s*({_TOKEN})\s*=\s*({_QUOTED}|{_TOKEN})\s*(?:,|$)")
_SCHEME = re.compile(rf"\s*,?\s*({_TOKEN})(?:\s+|$)")


@dataclass(frozen=True)
class BearerChallenge:
    """The parameters of a ``Bearer`` challenge, or of a ``DPoP`` one (``scheme``), which
    carries the same ``error``, ``scope`` and ``resource_metadata``."""

    params: dict[str, str] = field(default_factory=dict)
    scheme: str = "bearer"

    @property
    def error(self) -> str | None:
        return self.params.get("error")

    @property
    def scope(self) -> str | None:
        scope = self.params.get("scope")
        return scope if scope and scope.strip() else None

    @property
    def scopes(self) -> list[str]:
        return parse_scope(self.scope)

    @property
    def resource_metadata(self) -> str | None:
        return self.params.get("resource_metadata") or None

    @property
    def algs(self) -> list[str]:
        """A DPoP challenge's ``algs``: the proof algorithms the resource accepts."""
        return self.params.get("algs", "").split()


def _unquote(value: str) -> str:
    if value.startswith('"'):
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _parse_one(header: str) -> list[tuple[str, dict[str, str]]]:
    challenges: list[tuple[str, dict[str, str]]] = []
    pos = 0
    while pos < len(header):
        scheme = _SCHEME.match(header, pos)
        if scheme is None:
            break
        pos = scheme.end()
        params: dict[str, str] = {}
        while (param := _PARAM.match(header, pos)) is not None:
            # a following "Scheme name=value" has no '=' right after its first token
            params.setdefault(param.group(1).lower(), _unquote(param.group(2)))
            pos = param.end()
        challenges.append((scheme.group(1).lower(), params))
        if pos == scheme.end():  # token68 or junk: skip to the next comma
            comma = header.find(",", pos)
            pos = len(header) if comma < 0 else comma + 1
    return challenges


def parse_challenges(headers: Iterable[str]) -> list[BearerChallenge]:
    """Every ``Bearer`` and ``DPoP`` challenge among ``WWW-Authenticate`` values, in order."""
    return [
        BearerChallenge(params, scheme)
        for header in headers
        for scheme, params in _parse_one(header)
        if scheme in ("bearer", "dpop")
    ]


def parse_bearer_challenge(headers: Iterable[str], *, dpop: bool = False) -> BearerChallenge | None:
    """The challenge to act on: the first of the scheme the request used (``dpop``: it carried
    a DPoP-bound token; a resource puts the error in that scheme's challenge), else the first
    of the other scheme (a resource that accepts only DPoP sends only a DPoP challenge)."""
    found = parse_challenges(headers)
    first = "dpop" if dpop else "bearer"
    return next((c for c in found if c.scheme == first), found[0] if found else None)


def offered_dpop_algs(headers: Iterable[str]) -> list[str] | None:
    """The ``algs`` of the resource's DPoP challenge (``[]`` when it names none); ``None``
    when it sends no DPoP challenge."""
    return next((c.algs for c in parse_challenges(headers) if c.scheme == "dpop"), None)
