"""Every code block of README.md is run by a test or marked illustrative with its reason.

A block marked ``<!-- run: NAME -->`` must be fetched by some test with ``readme_block("NAME")``
(the tests that run them are in ``tests/e2e/test_readme_blocks.py`` and
``tests/e2e/test_install.py``); a block marked ``<!-- illustrative: REASON -->`` is not run and
says why. A block with neither fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from .readme import ROOT, blocks, on_ports, readme_blocks

FETCHED = re.compile(r"""readme_block\(\s*["']([^"']+)["']\s*\)""")


def names_fetched_by_tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        if path.name in {"readme.py", "test_readme.py"}:
            continue
        names.update(FETCHED.findall(path.read_text(encoding="utf-8")))
    return names


def test_every_readme_code_block_is_run_by_a_test_or_marked_illustrative_with_a_reason() -> None:
    found = readme_blocks()
    assert found, "no code blocks found in README.md"
    fetched = names_fetched_by_tests()
    problems = []
    for block in found:
        where = f"README.md line {block.line} ({block.lang or 'no language'})"
        if block.kind is None:
            problems.append(f"{where}: neither <!-- run: NAME --> nor <!-- illustrative: WHY -->")
        elif not block.label:
            problems.append(f"{where}: the {block.kind} marker has no name or reason")
        elif block.kind == "run" and block.label not in fetched:
            problems.append(f"{where}: no test runs readme_block({block.label!r})")
    assert not problems, "\n".join(problems)


def test_every_block_name_a_test_fetches_marks_exactly_one_readme_block() -> None:
    runs = [b.label for b in readme_blocks() if b.kind == "run"]
    assert len(runs) == len(set(runs)), runs
    assert names_fetched_by_tests() <= set(runs)


def test_an_unmarked_block_or_a_marker_that_does_not_directly_precede_is_reported() -> None:
    markdown = (
        "<!-- run: first -->\n```bash\necho 1\n```\n\n"
        "<!-- illustrative: needs a real domain -->\n\n```python\nprint(2)\n```\n"
        "<!-- run: stale -->\nSome prose in between.\n```bash\necho 3\n```\n"
        "```\nplain\n```\n"
    )
    found = blocks(markdown)
    assert [(b.kind, b.label, b.text) for b in found] == [
        ("run", "first", "echo 1\n"),
        ("illustrative", "needs a real domain", "print(2)\n"),
        (None, "", "echo 3\n"),
        (None, "", "plain\n"),
    ]


def test_on_ports_moves_only_the_documented_loopback_ports() -> None:
    text = (
        'authorization_servers=["http://127.0.0.1:9000"]\n'
        "uvicorn.run(app, host='127.0.0.1', port=8001)\n"
        "mcpauth proxy --port 8002 --resource http://127.0.0.1:8002/mcp # not 80021\n"
    )
    moved = on_ports(text, {9000: 41000, 8001: 41001, 8002: 41002})
    assert moved == (
        'authorization_servers=["http://127.0.0.1:41000"]\n'
        "uvicorn.run(app, host='127.0.0.1', port=41001)\n"
        "mcpauth proxy --port 41002 --resource http://127.0.0.1:41002/mcp # not 80021\n"
    )


def test_the_readme_names_the_distribution_that_is_ours() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    # `mcpauth` on PyPI is an unrelated project: every install names mcpauth-kit
    assert not re.search(r"pip install [^\n]*['\"]mcpauth\[", text)
    assert "pip install 'mcpauth-kit[server]'" in text
    assert Path(ROOT / "pyproject.toml").read_text().count('name = "mcpauth-kit"') == 1
