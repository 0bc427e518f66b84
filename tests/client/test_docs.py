"""The API reference (docs/api/client.md) names every public name, and its examples parse."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import mcpauth.client
import mcpauth.client.flow

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "api" / "client.md"


def public_names() -> list[str]:
    return [*mcpauth.client.__all__, *mcpauth.client.flow.__all__]


@pytest.mark.parametrize("name", public_names())
def test_the_reference_names_every_public_name(name: str) -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    assert re.search(rf"`{re.escape(name)}[`(]", text), f"docs/api/client.md lacks `{name}`"


def test_the_examples_in_the_reference_are_python_that_parses() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    examples = [b for b in blocks if b.startswith(("import ", "from "))]
    assert len(examples) >= 3
    for example in examples:
        ast.parse(example)
