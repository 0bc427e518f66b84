"""Where a client_credentials token costs its time in mcpauth, in process (no HTTP server):
each step of the token endpoint timed on its own, then the whole ASGI app.

    .venv/bin/python bench/client_credentials/profile.py [--iterations 2000] [--src DIR]

Same setup as run.py (SQLite in a temporary directory, one resource with one scope, one
client_secret_basic client). Pinned to one CPU. Prints microseconds per call (best of five
repeats of ``--iterations`` calls, so other load on the machine inflates the numbers less).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench import common
from bench.common import RESOURCE, SCOPE

HERE = Path(__file__).resolve().parent
ISSUER = "http://127.0.0.1:9000"
REPEATS = 5


def best(fn: Callable[[], Any], n: int) -> float:
    """Microseconds per call, best of REPEATS runs of n calls."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n * 1e6)
    return min(times)


def best_async(fn: Callable[[], Awaitable[Any]], n: int) -> float:
    async def run() -> float:
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            for _ in range(n):
                await fn()
            times.append((time.perf_counter() - start) / n * 1e6)
        return min(times)

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--src", type=Path, help="import mcpauth from this checkout instead")
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, str(args.src.resolve()))
    os.sched_setaffinity(0, {1})
    n = args.iterations
    with tempfile.TemporaryDirectory(prefix="mcpauth-profile-cc-") as tmp:
        workdir = Path(tmp)
        env = common.mcpauth_env(
            workdir,
            f"sqlite:///{workdir / 'mcpauth.db'}",
            **({"PYTHONPATH": str(args.src.resolve())} if args.src else {}),
            MCPAUTH_RATE_LIMIT_TOKEN=str(10**9),
        )
        client_id, secret = common.setup_client_credentials(env)
        os.environ.update({k: env[k] for k in ("MCPAUTH_SECRET_KEY", "MCPAUTH_DATABASE_URL")})
        os.environ["MCPAUTH_RATE_LIMIT_TOKEN"] = env["MCPAUTH_RATE_LIMIT_TOKEN"]
        report(n, client_id, secret)
    return 0


def asgi_call(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], data: bytes
) -> Callable[[], Awaitable[None]]:
    """One request through the whole ASGI app (middleware, routing, endpoint, thread hops)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 9000),
    }

    async def call() -> None:
        sent = False
        status = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": data, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await app(scope, receive, send)
        if status != 200:
            raise SystemExit(f"{method} {path}: {status}")

    return call


def report(n: int, client_id: str, secret: str) -> None:
    import mcpauth
    from mcpauth.server.app import create_app
    from mcpauth.server.clients import authentication
    from mcpauth.server.clients.directory import NOTHING_LOADED
    from mcpauth.server.config import load_settings
    from mcpauth.server.crypto import matches
    from mcpauth.server.http_io import parse_form
    from mcpauth.server.tokens import endpoint as token_endpoint
    from mcpauth.server.tokens.grants import client_credentials

    print(f"mcpauth imported from {Path(mcpauth.__file__).parent}")
    app = create_app(load_settings({"issuer": ISSUER}))
    ctx = app.state.mcpauth
    auth = "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    form = {"grant_type": "client_credentials", "resource": RESOURCE, "scope": SCOPE}
    body = urlencode(form).encode()
    address = "127.0.0.1"
    credentials = authentication.presented_credentials(auth, form)

    def answered() -> bytes:
        """What the endpoint does: from memory, or (a cache expired) in a worker thread, which
        loads the client, its lockout state, the resources and the key again."""
        body = token_endpoint._answer_from_memory(ctx, form, credentials, address)
        if body is not None:
            return body
        return token_endpoint._respond(ctx, form, auth, address, credentials, [], NOTHING_LOADED)

    answered()
    client = ctx.clients.cached(client_id)
    resources = ctx.resources.cached()
    signer = ctx.keys.cached_signer()
    if client is None or resources is None or signer is None:
        raise SystemExit("the first token request did not fill the caches")
    issuance = client_credentials.issue(ctx, client, form, resources)
    steps = [
        ("parse_form (the request body)", lambda: parse_form(body)),
        ("presented_credentials (Basic)", lambda: authentication.presented_credentials(auth, form)),
        ("secret digest compare", lambda: matches(secret, client.secret_digest)),
        (
            "authenticated_from_memory",
            lambda: authentication.authenticated_from_memory(ctx, credentials, address, ctx.now()),
        ),
        (
            "client_credentials.issue",
            lambda: client_credentials.issue(ctx, client, form, resources),
        ),
        ("Issuance.response (claims signed)", lambda: issuance.response(signer)),
        ("  of which signer.sign(claims)", lambda: signer.sign(issuance.claims)),
        ("the token answered from memory (all of the above)", answered),
    ]
    rows = [(name, best(fn, n)) for name, fn in steps]
    token_headers = [
        (b"host", b"127.0.0.1:9000"),
        (b"content-type", b"application/x-www-form-urlencoded"),
        (b"authorization", auth.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    rows += [
        (
            "whole ASGI app: POST /token",
            best_async(asgi_call(app, "POST", "/token", token_headers, body), n),
        ),
        (
            "whole ASGI app: GET /health",
            best_async(asgi_call(app, "GET", "/health", [(b"host", b"127.0.0.1:9000")], b""), n),
        ),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'step':<{width}}  µs/call")
    for name, micros in rows:
        print(f"{name:<{width}}  {micros:8.1f}")


if __name__ == "__main__":
    sys.exit(main())
