"""The code blocks of README.md, each with the marker before it.

A block is run by a test when an HTML comment ``<!-- run: NAME -->`` is the last non-blank line
before its opening fence and a test fetches it with ``readme_block("NAME")``; it is not run
when the comment is ``<!-- illustrative: REASON -->``. ``tests/test_readme.py`` fails on a
block with neither, and on a ``run`` name no test fetches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = re.compile(r"^<!--\s*(run|illustrative):\s*(.*?)\s*-->$")
FENCE = re.compile(r"^(```|~~~)\s*(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, from 1
    lang: str
    text: str
    kind: str | None  # "run", "illustrative" or None (unmarked)
    label: str  # the run name or the reason


def blocks(markdown: str) -> list[Block]:
    """Every fenced block of ``markdown`` with its marker."""
    found: list[Block] = []
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, lang = opening.groups()
        end = index + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        before = [line.strip() for line in lines[:index] if line.strip()]
        marker = MARKER.match(before[-1]) if before else None
        found.append(
            Block(
                line=index + 1,
                lang=lang,
                text="\n".join(lines[index + 1 : end]) + "\n",
                kind=marker.group(1) if marker else None,
                label=marker.group(2) if marker else "",
            )
        )
        index = end + 1
    return found


def readme_blocks() -> list[Block]:
    return blocks(README.read_text(encoding="utf-8"))


def readme_block(name: str) -> Block:
    """The README block marked ``<!-- run: name -->``."""
    named = [b for b in readme_blocks() if b.kind == "run" and b.label == name]
    assert len(named) == 1, f"README.md has {len(named)} blocks marked run: {name}"
    return named[0]


def on_ports(text: str, ports: dict[int, int]) -> str:
    """``text`` with each documented loopback port replaced (``127.0.0.1:9000`` and the like),
    so that a test runs a block on free ports; nothing else changes."""
    for documented, actual in ports.items():
        text = text.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{actual}")
        text = re.sub(rf"(--port\s+|port=){documented}\b", rf"\g<1>{actual}", text)
    return text
