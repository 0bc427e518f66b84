"""An admin command run forked (tests/forks.py) behaves as the same command started with
exec: the same output, error output and exit status, standard input passed through, the
environment and directory it is given, and a process of its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import forks
from .support import MCPAUTH, run_cli


def exec_cli(
    args: list[str], env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env=env, stdin=stdin, fork=False)


def forked(
    args: list[str], env: dict[str, str], stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    assert forks.forkable([MCPAUTH, *args], env)
    return forks.run([MCPAUTH, *args], env=env, stdin=stdin, cwd=cwd, timeout=60)


@pytest.fixture
def env(tmp_path: Path, sqlite_template: Path) -> dict[str, str]:
    shutil.copyfile(sqlite_template, tmp_path / "db.sqlite")
    return {
        **os.environ,
        "MCPAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "MCPAUTH_SECRET_KEY": "forked-cli-secret-0123456789",
        "MCPAUTH_ISSUER": "https://auth.example.com",
    }


def test_output_and_status_are_those_of_the_command_started_with_exec(env: dict[str, str]) -> None:
    added = forked(["users", "add", "bob", "--password-stdin"], env, stdin="a long passphrase\n")
    assert added.returncode == 0, added.stderr
    for args in (["users", "list"], ["resources", "list"], ["users", "remove", "nobody"]):
        mine, theirs = forked(args, env), exec_cli(args, env)
        assert (mine.returncode, mine.stdout, mine.stderr) == (
            theirs.returncode,
            theirs.stdout,
            theirs.stderr,
        )
    assert [u["username"] for u in json.loads(exec_cli(["users", "list"], env).stdout)] == ["bob"]


def test_a_bad_database_is_the_same_plain_error_and_status(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "not.db").write_bytes(b"not a database, " * 512)
    bad = env | {"MCPAUTH_DATABASE_URL": f"sqlite:///{tmp_path / 'not.db'}"}
    mine, theirs = forked(["users", "list"], bad), exec_cli(["users", "list"], bad)
    assert mine.returncode == theirs.returncode != 0
    assert mine.stderr == theirs.stderr
    assert "Traceback" not in mine.stderr


def test_each_command_has_its_own_environment_and_directory(
    env: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "conf" / "mcpauth.toml"
    config.parent.mkdir()
    config.write_text('[mcpauth]\nservice_name = "Forked"\n')
    config.chmod(0o640)
    added = forked(
        [
            "idps",
            "add",
            "gh",
            "--name",
            "GitHub",
            "--kind",
            "github",
            "--client-id",
            "Iv1.abc",
            "--client-secret-file",
            "/run/s",
        ],
        env | {"MCPAUTH_CONFIG": "mcpauth.toml"},
        cwd=config.parent,
    )
    assert added.returncode == 0, added.stderr
    assert "[[mcpauth.upstream]]" in config.read_text()
    # the next command sees neither that variable nor that directory
    again = forked(
        [
            "idps",
            "add",
            "gh2",
            "--name",
            "Other",
            "--kind",
            "github",
            "--client-id",
            "x",
            "--client-secret-file",
            "/s",
        ],
        env,
        cwd=tmp_path,
    )
    assert again.returncode != 0
    assert "gh2" not in config.read_text()


def test_only_this_interpreter_s_programs_in_its_setting_are_forked() -> None:
    env = dict(os.environ)
    assert forks.forkable([MCPAUTH, "users", "list"], env)
    assert forks.forkable([MCPAUTH, "serve", "--port", "1"], env)
    assert forks.forkable([sys.executable, "-m", "mcpauth.proxy.cli"], env)
    assert forks.forkable([sys.executable, "examples/protected_server.py"], env)
    assert not forks.forkable([MCPAUTH, "token", "https://x"], env)  # start-up is measured
    assert not forks.forkable([sys.executable, "-c", "pass"], env)
    assert not forks.forkable(["node", "server.js"], env)
    assert not forks.forkable([MCPAUTH, "users", "list"], {**env, "PYTHONPATH": "/elsewhere"})


SCRIPT = """
import os, signal, sys, time
print("argv", sys.argv[1:], "cwd", os.getcwd(), "name", __name__, flush=True)
print("group", os.getpgid(0) == os.getpid(), "env", os.environ.get("FORK_TEST"), flush=True)
if sys.argv[1] == "serve":
    os.write(int(sys.argv[2]), b"listening")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    time.sleep(60)
raise SystemExit(int(sys.argv[1]))
"""


def test_a_forked_script_runs_as_main_in_its_session_and_reports_its_status(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(SCRIPT)
    log = tmp_path / "out.log"
    env = {**os.environ, "FORK_TEST": "yes"}
    with log.open("wb") as out:
        done = forks.ForkedProcess(
            [sys.executable, str(script), "7"],
            env=env,
            cwd=tmp_path,
            stdout=out.fileno(),
            new_session=True,
        )
        assert done.wait(timeout=30) == 7
    text = log.read_text()
    assert f"argv ['7'] cwd {tmp_path} name __main__" in text
    assert "group True env yes" in text

    # a long-running one: a descriptor passed at its own number, its signal handler, its status
    reader, writer = os.pipe()
    try:
        serving = forks.ForkedProcess(
            [sys.executable, str(script), "serve", str(writer)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            pass_fds=[writer],
        )
        assert os.read(reader, 100) == b"listening"
        assert serving.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            serving.wait(timeout=0.2)
        serving.terminate()
        assert serving.wait(timeout=30) == 3
        killed = forks.ForkedProcess(
            [sys.executable, str(script), "serve", str(writer)],
            env=env,
            cwd=tmp_path,
            pass_fds=[writer],
        )
        assert os.read(reader, 100) == b"listening"
        killed.kill()
        assert killed.wait(timeout=30) == -signal.SIGKILL
    finally:
        os.close(reader)
        os.close(writer)


LAUNCHED = """
import os, signal, sys, time
print("argv", sys.argv[1:], "env", os.environ.get("FORK_TEST"), flush=True)
print("preloaded", "wsgiref.simple_server" in sys.modules, flush=True)
print("pid", os.getpid(), flush=True)
if sys.argv[1] == "serve":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    print("listening", flush=True)
    time.sleep(60)
raise SystemExit(int(sys.argv[1]))
"""


def test_a_launched_program_is_forked_from_a_server_with_its_imports_and_ends_as_it_does(
    tmp_path: Path,
) -> None:
    """What another program (the conformance suite) starts: ``python -S tests/forks.py launch
    PATH PROGRAM`` runs PROGRAM forked from a server that imported what it was told, with the
    launcher's streams, environment and directory; the launcher ends with its status and passes
    on the signals it is sent."""
    script = tmp_path / "program.py"
    script.write_text(LAUNCHED)
    launcher = [sys.executable, "-S", str(Path(forks.__file__)), "launch"]
    env = {**os.environ, "FORK_TEST": "launched"}
    with forks.server(["wsgiref.simple_server"]) as path:
        done = subprocess.run(
            [*launcher, path, str(script), "7"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=30,
            check=False,
        )
        assert done.returncode == 7, done.stderr
        assert "argv ['7'] env launched" in done.stdout
        assert "preloaded True" in done.stdout  # imported by the server, not by the program

        serving = subprocess.Popen(
            [*launcher, path, str(script), "serve"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        assert serving.stdout is not None
        for _ in range(4):  # the lines it prints, the last once its handler is set
            line = serving.stdout.readline()
        assert line.strip() == "listening"
        serving.terminate()  # to the launcher, which passes it on
        assert serving.wait(timeout=30) == 3
        serving.stdout.close()

        orphan = subprocess.Popen(
            [*launcher, path, str(script), "serve"], stdout=subprocess.PIPE, text=True, env=env
        )
        assert orphan.stdout is not None
        lines = [orphan.stdout.readline() for _ in range(4)]
        assert lines[-1].strip() == "listening"
        child = int(lines[2].split()[1])
        orphan.kill()  # the launcher dies without passing anything on: its program runs on
        orphan.wait(timeout=30)
        orphan.stdout.close()
        os.kill(child, 0)
    # leaving the server killed what it had forked and was still running
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("a program forked by the server outlived it")
