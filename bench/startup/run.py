"""How long an ``mcpauth`` process takes to start, for the base tree and this one side by side:
importing the server (``import mcpauth.server.app``), ``mcpauth --help``, an admin command
(``mcpauth users list`` on a current SQLite database) and ``mcpauth serve`` from its start to
its first ``GET /health`` answer (on a current database, as every restart and every test's copy
of the migrated template is; and on a new one, which the server migrates and gives a key).

    .venv/bin/python bench/startup/run.py [--base-ref main] [--base PATH] [--head PATH]
                                          [--rounds 7]

``--base`` defaults to a temporary `git worktree` of ``--base-ref``. Each measurement is a fresh
process with its tree first on ``PYTHONPATH`` (the venv's own ``mcpauth`` script, as a user
runs it), its bytecode cached as an installed package has it (a first round, not counted,
writes the caches), pinned to one CPU; within a round the trees run one after the other, so
the machine's load falls on both alike. Reported: the median and the least over rounds of the
process's CPU milliseconds (user plus system: on a shared machine the time a process waits for
a core is not its cost) and the wall milliseconds (for ``serve``, to its first answer).
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench import common  # noqa: E402

Measure = Callable[[Path, Path], tuple[float, float]]  # (tree, workdir) -> (cpu ms, wall ms)


def _env(tree: Path, workdir: Path) -> dict[str, str]:
    """The tree first on the path, bytecode cached (in the working directory) as an installed
    package has it, no MCPAUTH_* or OTEL_* setting of this shell."""
    skipped = ("MCPAUTH_", "OTEL_", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skipped)}
    env.update(
        PYTHONPATH=str(tree),
        PYTHONPYCACHEPREFIX=str(workdir / "pycache"),
        MCPAUTH_SECRET_KEY=common.SECRET_KEY,
        HOME=str(workdir),
        XDG_DATA_HOME=str(workdir / "data"),
    )
    return env


def _run(command: list[str], tree: Path, workdir: Path) -> tuple[float, float]:
    """CPU and wall milliseconds of ``command`` run to its end (its output discarded)."""
    before = common.children_cpu_seconds()
    started = time.perf_counter()
    done = subprocess.run(
        ["taskset", "-c", "0", *command],
        env=_env(tree, workdir),
        cwd=workdir,
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command} failed in {tree}:\n{done.stderr.decode()[-2000:]}")
    return (common.children_cpu_seconds() - before) * 1000, wall * 1000


def _database(workdir: Path, name: str) -> str:
    return f"sqlite:///{workdir / f'{name}.db'}"


def import_server(tree: Path, workdir: Path) -> tuple[float, float]:
    return _run([sys.executable, "-c", "import mcpauth.server.app"], tree, workdir)


def help_text(tree: Path, workdir: Path) -> tuple[float, float]:
    return _run([common.MCPAUTH, "--help"], tree, workdir)


def users_list(tree: Path, workdir: Path) -> tuple[float, float]:
    database = _database(workdir, "current")
    return _run([common.MCPAUTH, "users", "list", "--database", database], tree, workdir)


def _answers(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", "/health")
        status = connection.getresponse().status
        connection.close()
    except OSError:
        return False
    if status != 200:
        raise SystemExit(f"/health answered {status}")
    return True


def _serve(tree: Path, workdir: Path, database: str) -> tuple[float, float]:
    """CPU and wall milliseconds from starting `mcpauth serve` to its first /health answer
    (polled every 5 ms; the poller runs on the other CPU)."""
    port = common.free_port()
    issuer = f"http://127.0.0.1:{port}"
    command = [*common.serve_command("0", issuer, port), "--database", database]
    log = workdir / "serve.log"
    started = time.perf_counter()
    process = common.spawn(command, log, env=_env(tree, workdir), cwd=workdir)
    try:
        while not _answers(port):
            if process.poll() is not None or time.perf_counter() - started > 60:
                raise SystemExit(f"serve did not answer:\n{log.read_text()}")
            time.sleep(0.005)
        wall = time.perf_counter() - started
        cpu = common.cpu_seconds(process.pid)
    finally:
        common.stop(process)
    return cpu * 1000, wall * 1000


def serve_current(tree: Path, workdir: Path) -> tuple[float, float]:
    return _serve(tree, workdir, _database(workdir, "current"))


def serve_new(tree: Path, workdir: Path) -> tuple[float, float]:
    for leftover in workdir.glob("new.*"):  # the last round's database
        leftover.unlink()
    return _serve(tree, workdir, _database(workdir, "new"))


MEASURES: dict[str, Measure] = {
    "import mcpauth.server.app": import_server,
    "mcpauth --help": help_text,
    "mcpauth users list": users_list,
    "serve to first /health, current database": serve_current,
    "serve to first /health, new database": serve_new,
}


@contextmanager
def base_tree(args: argparse.Namespace) -> Iterator[Path]:
    if args.base is not None:
        yield args.base
        return
    with tempfile.TemporaryDirectory(prefix="mcpauth-base-") as tmp:
        tree = Path(tmp) / "base"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", str(tree), args.base_ref], check=True)
        try:
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def _label(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()[:72]


def _prepare(tree: Path, workdir: Path) -> None:
    """The tree's working directory with a current database (``mcpauth db upgrade``), used by
    every round."""
    workdir.mkdir()
    _run([common.MCPAUTH, "db", "upgrade", "--database", _database(workdir, "current")],
         tree, workdir)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-ref", default="main")
    parser.add_argument("--base", type=Path, help="a tree to measure as the base instead")
    parser.add_argument("--head", type=Path, default=ROOT)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    common.require_tools("taskset")
    load = os.getloadavg()[0]
    with base_tree(args) as base, tempfile.TemporaryDirectory(prefix="mcpauth-startup-") as tmp:
        trees = {"base": base, "head": args.head.resolve()}
        workdirs = {name: Path(tmp) / name for name in trees}  # each tree's databases
        for name, tree in trees.items():
            _prepare(tree, workdirs[name])
        results: dict[tuple[str, str], tuple[list[float], list[float]]] = {
            (m, t): ([], []) for m in MEASURES for t in trees
        }
        for round_ in range(args.rounds + 1):  # the first writes the bytecode caches
            for measure_name, measure in MEASURES.items():
                for tree_name, tree in trees.items():
                    cpu, wall = measure(tree, workdirs[tree_name])
                    if round_:
                        results[measure_name, tree_name][0].append(cpu)
                        results[measure_name, tree_name][1].append(wall)
        labels = {"base": _label(base), "head": _label(args.head)}
    print(
        f"rounds: {args.rounds}; {platform.python_version()}, {os.cpu_count()} CPUs, measured "
        f"process pinned to CPU 0; load average before/after: {load:.1f}/{os.getloadavg()[0]:.1f}"
    )
    print(f"base: {labels['base']}; head: {labels['head']}\n")
    print("| measure | tree | median CPU ms | least CPU ms | median wall ms | least wall ms |")
    print("|---|---|---|---|---|---|")
    for (measure_name, tree_name), (cpus, walls) in results.items():
        print(
            f"| {measure_name} | {tree_name} | {statistics.median(cpus):.0f} | {min(cpus):.0f} "
            f"| {statistics.median(walls):.0f} | {min(walls):.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
