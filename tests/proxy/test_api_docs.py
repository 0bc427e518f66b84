"""docs/api/proxy.md names every public name of ``mcpauth.proxy``, and each of its
Python examples runs as written (they build objects; none serves or fetches anything), with
warnings as errors, so a renamed parameter or a deprecated form in the docs fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import mcpauth.proxy

DOC = Path(__file__).resolve().parents[2] / "docs" / "api" / "proxy.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_every_public_name_is_documented() -> None:
    text = DOC.read_text()
    missing = [name for name in mcpauth.proxy.__all__ if f"`{name}" not in text]
    assert not missing


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_example_runs(block: str) -> None:
    exec(compile(block, str(DOC), "exec"), {"__name__": "docs_example"})  # noqa: S102
