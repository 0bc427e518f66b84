"""Command-line start-up: how long `mcpauth token URL` takes to print a stored, valid token,
against `python -c pass` (the interpreter's own start-up, the floor) in the same rounds.

    .venv/bin/python bench/cli/run.py [--rounds 40] [--baseline PATH]

A token for URL is stored, valid for a day, in a `FileStorage` file in a temporary directory
(with the discovery result and the client it belongs to, as `mcpauth login` leaves them); the
command reads it and prints it. Nothing goes to the network: every run has HTTP(S)_PROXY set to
a closed port on 127.0.0.1, so a command that tried would fail, and each run must print the
token and exit 0. `--baseline PATH` also times the command imported from PATH (a checkout of
an earlier commit, e.g. `git worktree add --detach /tmp/base main`), the "before" of a change.
Each checkout's modules are compiled to bytecode first (``compileall``), as an installed
package has them: with PYTHONDONTWRITEBYTECODE set (this machine sets it) a checkout would
otherwise be compiled again on every run. The commands run interleaved, the order rotating
every round; reported are medians (and minima) of wall time and of CPU time (user + system,
from the kernel's accounting of the child), and how many modules each imports
(`python -X importtime`). Results go to RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench import common

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MCPAUTH = Path(sys.executable).parent / "mcpauth"  # the console script, as a user runs it
URL = "https://mcp.example.com/mcp"
ISSUER = "https://as.example.com"
TOKEN = "bench-stored-access-token"
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}

STORE_SCRIPT = """
import sys, time
from mcpauth.client import ClientCredentials, FileStorage, TokenKey, TokenSet
from mcpauth.client.discovery import Discovery
from mcpauth.metadata import AuthorizationServerMetadata, ProtectedResourceMetadata

path, url, issuer, token = sys.argv[1:5]
storage = FileStorage(path)
metadata = AuthorizationServerMetadata(
    issuer=issuer, authorization_endpoint=issuer + "/authorize", token_endpoint=issuer + "/token",
    registration_endpoint=issuer + "/register", code_challenge_methods_supported=["S256"],
)
prm = ProtectedResourceMetadata(resource=url, authorization_servers=[issuer])
storage.set_discovery(url, Discovery(url, issuer, metadata, prm))
storage.set_client(issuer, ClientCredentials("bench-client", issuer=issuer))
tokens = TokenSet(token, expires_at=time.time() + 86400, refresh_token="bench-refresh", scope="mcp")
storage.set_tokens(TokenKey(issuer, url, "bench-client"), tokens)
"""


@dataclass(frozen=True)
class Command:
    name: str
    argv: list[str]
    env: dict[str, str]
    expected: str  # stdout


def compile_checkout(checkout: Path) -> None:
    """Bytecode for every module of the checkout's mcpauth, as an install leaves it."""
    command = [sys.executable, "-m", "compileall", "-q", str(checkout / "mcpauth")]
    subprocess.run(command, check=True)


def store(path: Path) -> None:
    """A valid stored token for URL in ``path``, written by this checkout's client."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", STORE_SCRIPT, str(path), URL, ISSUER, TOKEN]
    subprocess.run(command, env=env, check=True)


def commands(store_path: Path, baseline: Path | None) -> list[Command]:
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)} | OFFLINE
    token = [str(MCPAUTH), "token", URL, "--store", str(store_path)]
    found = [
        Command("python -c pass (the floor)", [sys.executable, "-c", "pass"], base_env, ""),
        Command("mcpauth token URL", token, base_env | {"PYTHONPATH": str(ROOT)}, TOKEN + "\n"),
    ]
    if baseline is not None:
        env = base_env | {"PYTHONPATH": str(baseline)}
        found.append(Command("mcpauth token URL (baseline)", token, env, TOKEN + "\n"))
    return found


def run_once(command: Command) -> tuple[float, float]:
    """Wall and CPU seconds of one run, which must print what is expected and exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command.argv, env=command.env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or done.stdout != command.expected:
        raise SystemExit(f"{command.name}: exit {done.returncode}, {done.stdout!r} {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def modules_imported(command: Command) -> int:
    """How many modules the command imports (one line each under ``python -X importtime``)."""
    env = command.env | {"PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(command.argv, env=env, capture_output=True, text=True, check=True)
    return sum(1 for line in done.stderr.splitlines() if line.startswith("import time:")) - 1


def report(
    args: argparse.Namespace,
    found: list[Command],
    runs: dict[str, list[tuple[float, float]]],
    modules: dict[str, int],
    loads: tuple[float, float],
) -> str:
    def med(name: str, index: int) -> float:
        return statistics.median(r[index] for r in runs[name]) * 1000

    def low(name: str, index: int) -> float:
        return min(r[index] for r in runs[name]) * 1000

    floor, ours = found[0].name, found[1].name
    base = found[2].name if len(found) > 2 else None
    command = " ".join([".venv/bin/python", "bench/cli/run.py", *sys.argv[1:]])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    before = (
        f"; before (the baseline checkout): {med(base, 0):.0f} ms, {med(base, 1):.0f} ms CPU"
        if base
        else ""
    )
    lines = [
        "# Command-line start-up: `mcpauth token URL` with a stored, valid token",
        "",
        f"**`mcpauth token URL` prints a stored token in {med(ours, 0):.0f} ms "
        f"({med(ours, 1):.0f} ms CPU), {med(ours, 0) - med(floor, 0):.0f} ms above "
        f"`python -c pass` ({med(floor, 0):.0f} ms){before}.**",
        f"Command: `{command}` ({when}).",
        "Peer: `python -c pass` in the same rounds, the interpreter's start-up and so the floor "
        "of any Python command"
        + (f"; the baseline is the same command from {args.baseline}" if args.baseline else "")
        + ".",
        "Caveat: 2 shared cores; wall times move with the load, compare rows of one run only.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other work, Python "
        f"{platform.python_version()}; {common.load_note(*loads)}. "
        f"Rounds: {args.rounds}, the commands interleaved (the order rotating each round); "
        "medians, with the minimum in brackets. The store is a `FileStorage` file in a "
        "temporary directory holding the discovery result, the client and a token valid for "
        "a day; HTTP(S)_PROXY point at a closed port, so no run reached the network, and "
        "every run printed the token and exited 0. Both checkouts' modules were compiled to "
        "bytecode first, as an installed package has them.",
        "",
        "| command | wall ms | CPU ms | above the floor, wall ms | modules imported |",
        "|---|---|---|---|---|",
    ]
    for command_ in found:
        name = command_.name
        lines.append(
            f"| {name} | {med(name, 0):.0f} ({low(name, 0):.0f}) | {med(name, 1):.0f} "
            f"({low(name, 1):.0f}) | {med(name, 0) - med(floor, 0):.0f} | {modules[name]} |"
        )
    lines += [
        "",
        "What a stored-token read imports: `mcpauth.cli` builds the parser of the one command "
        "group its command line names (not the proxy's, which loads the middleware), the client "
        "package binds its names on first use, and `mcpauth token` runs the sans-I/O flow "
        "over the storage alone; the HTTP clients (httpx, httpx2, anyio), pydantic and the "
        "JOSE stack (PyJWT, cryptography) load only when a refresh, a sign-in or a DPoP proof "
        "needs them. `python -X importtime -m mcpauth.cli token URL` lists the rest.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit")
    args = parser.parse_args()
    loads_before = os.getloadavg()[0]
    for checkout in (ROOT, args.baseline):
        if checkout is not None:
            compile_checkout(checkout)
    with tempfile.TemporaryDirectory(prefix="mcpauth-bench-cli-") as tmp:
        store_path = Path(tmp) / "client.json"
        store(store_path)
        found = commands(store_path, args.baseline)
        modules = {command.name: modules_imported(command) for command in found}
        runs: dict[str, list[tuple[float, float]]] = {command.name: [] for command in found}
        for command in found:  # one warm-up run each (the page cache, .pyc files)
            run_once(command)
        for round_ in range(args.rounds):
            shift = round_ % len(found)
            for command in found[shift:] + found[:shift]:
                runs[command.name].append(run_once(command))
    text = report(args, found, runs, modules, (loads_before, os.getloadavg()[0]))
    (HERE / "RESULTS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
