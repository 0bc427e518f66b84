"""The images the container test runs (tests/e2e/test_container.py), built once and cached.

Where a registry answers, docker/Dockerfile builds on its default ``python:3.11-slim-bookworm``
and compose pulls ``postgres:16-bookworm``. Where none does (these CI machines), a minimal Debian
bookworm is made with debootstrap and imported under a tag named after its recipe, so later
sessions reuse it; on it are built a Python image (tests/e2e/docker/python.Dockerfile: Python
3.11 in a venv on ``PATH``, as the python image has it), which docker/Dockerfile is built
``FROM`` (``--build-arg PYTHON_IMAGE``), and, at the same time, a PostgreSQL image with Debian's
postgresql-15 (tests/e2e/docker/postgres.Dockerfile). Builds use Debian's ``/usr/bin/docker``
with its built-in BuildKit; the host's extra CA certificates reach pip as a build secret
(``PIP_CERT``), never as part of an image.

Run as a program (``python -m tests.e2e.container_images``) it builds everything and prints the
images, their sizes and how long each step took."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "docker"
DOCKER = "/usr/bin/docker"  # Debian's client: a newer one earlier on PATH may lack buildx
PUBLIC_PYTHON = "python:3.11-slim-bookworm"
PUBLIC_POSTGRES = "postgres:16-bookworm"
EXTRA_CAS = Path("/usr/local/share/ca-certificates")
SYSTEM_CAS = Path("/etc/ssl/certs/ca-certificates.crt")
SERVER_IMAGE = "mcpauth-test:server"
DEMO_MCP_IMAGE = "mcpauth-test:demo-mcp"
POSTGRES_IMAGE = "mcpauth-test-postgres:15"
PYTHON_IMAGE = "mcpauth-test-python:3.11-bookworm"
# the Debian base's recipe: its tag carries a hash of it, so a changed recipe builds anew
BASE_STRAP = ["--variant=minbase", "--include=ca-certificates", "bookworm"]
BASE_CLEAN = "var/cache/apt/archives/*.deb"
BASE_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["bash"]',
]


@dataclass
class Images:
    """What the compose stack runs, and what building it cost."""

    debian_base: str  # "" where a registry answers
    python_base: str
    server: str
    demo_mcp: str
    postgres: str  # PUBLIC_POSTGRES where a registry answers
    seconds: dict[str, float] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        names = [self.debian_base, self.python_base, self.server, self.demo_mcp, self.postgres]
        return {name: image_size(name) for name in names if name}


def docker(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    """Run ``docker ARGS``, return its output; a failure raises with what docker said."""
    done = subprocess.run(
        [DOCKER, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"docker {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done.stdout


def has_image(name: str) -> bool:
    probe = [DOCKER, "image", "inspect", name]
    return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0


def image_size(name: str) -> int:
    return int(docker("image", "inspect", "--format", "{{.Size}}", name).strip())


def registry_reachable() -> bool:
    """Whether the public python image is here or can be pulled (a bounded attempt)."""
    if has_image(PUBLIC_PYTHON):
        return True
    pull = [DOCKER, "pull", "--quiet", PUBLIC_PYTHON]
    try:
        return subprocess.run(pull, capture_output=True, timeout=120, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def apt_mirror() -> str:
    """The Debian mirror apt itself uses on this machine."""
    sources = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]
    for path in sources:
        if not path.is_file() or path.suffix not in ("", ".list", ".sources"):
            continue
        for line in path.read_text().splitlines():
            words = line.split()
            if path.suffix == ".sources" and words[:1] == ["URIs:"]:
                candidates = words[1:]
            elif words[:1] == ["deb"]:
                candidates = [w for w in words[1:] if not w.startswith("[")][:1]
            else:
                continue
            for uri in candidates:
                if uri.rstrip("/").endswith("/debian"):
                    return uri
    return "http://deb.debian.org/debian"


def base_tag() -> str:
    recipe = "\n".join([*BASE_STRAP, BASE_CLEAN, *BASE_CHANGES])
    return f"mcpauth-test-debian:bookworm-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def debootstrap_base(tag: str) -> None:
    """A minimal Debian bookworm from this machine's mirror, imported as ``tag``."""
    with tempfile.TemporaryDirectory(prefix="mcpauth-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(
            ["debootstrap", *BASE_STRAP, str(rootfs), apt_mirror()],
            check=True,
            capture_output=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        # neither package lists nor the downloaded packages: each build runs apt-get update
        for left in [*rootfs.glob("var/lib/apt/lists/*_*"), *rootfs.glob(BASE_CLEAN)]:
            left.unlink()
        changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            imported = subprocess.run(
                [DOCKER, "import", *changes, "-", tag],
                stdin=tar.stdout,
                capture_output=True,
                timeout=300,
                check=False,
            )
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait(timeout=60)
        if imported.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr.decode()[-2000:]}")


def ca_bundle(directory: Path) -> Path:
    """The system's CA bundle plus this host's extra CAs, for pip during the build only."""
    bundle = directory / "pip-ca-bundle.pem"
    parts = [SYSTEM_CAS.read_text()] if SYSTEM_CAS.is_file() else []
    parts += [p.read_text() for p in sorted(EXTRA_CAS.glob("*.crt"))]
    bundle.write_text("\n".join(parts))
    return bundle


def build(dockerfile: Path, tag: str, context: Path, *args: str, timeout: float = 900) -> None:
    docker(
        "build", "--quiet", "-f", str(dockerfile), "-t", tag, *args, str(context),
        timeout=timeout,
        env={"DOCKER_BUILDKIT": "1"},
    )  # fmt: skip


@contextmanager
def timing(seconds: dict[str, float], step: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    seconds[step] = time.monotonic() - started


def mcpauth_images(python_base: str, seconds: dict[str, float]) -> None:
    """docker/Dockerfile's server and demo-mcp targets on ``python_base``."""
    with tempfile.TemporaryDirectory(prefix="mcpauth-build-") as tmp:
        args = ["--build-arg", f"PYTHON_IMAGE={python_base}"]
        args += ["--secret", f"id=pip_cert,src={ca_bundle(Path(tmp))}"]
        args += ["--build-arg", "PIP_CERT=/run/secrets/pip_cert"]
        dockerfile = ROOT / "docker" / "Dockerfile"
        for target, tag in (("server", SERVER_IMAGE), ("demo-mcp", DEMO_MCP_IMAGE)):
            with timing(seconds, target):
                build(dockerfile, tag, ROOT, "--target", target, *args)


def ensure_images() -> Images:
    """Every image of the stack, built (or found in the build cache) now."""
    seconds: dict[str, float] = {}
    if registry_reachable():
        mcpauth_images(PUBLIC_PYTHON, seconds)
        return Images("", PUBLIC_PYTHON, SERVER_IMAGE, DEMO_MCP_IMAGE, PUBLIC_POSTGRES, seconds)
    debian = base_tag()
    if not has_image(debian):
        if shutil.which("debootstrap") is None:
            raise RuntimeError("no registry and no debootstrap: run scripts/ensure-docker.sh")
        with timing(seconds, "debootstrap base"):
            debootstrap_base(debian)
    base = ["--build-arg", f"BASE_IMAGE={debian}"]

    def python_then_mcpauth() -> None:
        with timing(seconds, "python base"):
            build(HERE / "python.Dockerfile", PYTHON_IMAGE, HERE, *base)
        mcpauth_images(PYTHON_IMAGE, seconds)

    def postgres() -> None:
        with timing(seconds, "postgres"):
            build(HERE / "postgres.Dockerfile", POSTGRES_IMAGE, HERE, *base)

    with ThreadPoolExecutor(max_workers=2) as pool:  # the two chains download at the same time
        for done in [pool.submit(python_then_mcpauth), pool.submit(postgres)]:
            done.result(timeout=1800)
    return Images(debian, PYTHON_IMAGE, SERVER_IMAGE, DEMO_MCP_IMAGE, POSTGRES_IMAGE, seconds)


def main() -> None:
    images = ensure_images()
    for name, size in images.sizes().items():
        print(f"{name}: {size / 1e6:.0f} MB")
    for step, took in images.seconds.items():
        print(f"{step}: {took:.1f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
