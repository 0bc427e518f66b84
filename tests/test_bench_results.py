"""Each benchmark's RESULTS.md opens with what a reader needs first, in its first lines: the
current figure (in bold), the command that produced it, and the peer it was measured against."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
RESULTS = sorted(BENCH.glob("*/RESULTS.md"))


def test_every_benchmark_has_results() -> None:
    benchmarks = sorted(p.parent for p in BENCH.glob("*/run.py"))
    assert benchmarks == [p.parent for p in RESULTS]


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.parent.name)
def test_results_open_with_the_figure_the_command_and_the_peer(path: Path) -> None:
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ")
    head = lines[2:8]
    assert head[0].startswith("**"), "the current figure, in bold, comes first"
    assert any("Command" in line and "run.py" in line for line in head), "the command"
    assert any(line.lstrip("*").startswith(("Peer", "Comparison")) for line in head), "the peer"
