"""What traces cost the middleware's hot path: a protected ``tools/call`` (cached token, scope
policy reading the body, trivial application) called in process, per request, for the base
tree (before traces existed), this tree with traces off, the same with its one hook taken out
(``__call__`` calling ``_http`` directly, as before: the hook's own cost, free of the two trees'
other differences), and this tree with traces on (an SDK provider whose exporter drops the
spans, so the figure is mcpauth's spans and the SDK's, not an exporter's).

    .venv/bin/python bench/tracing/run.py [--base-ref main] [--base PATH] [--head PATH]
                                          [--requests 20000] [--rounds 7]

``--base`` defaults to a temporary `git worktree` of ``--base-ref``. Each measurement is a
fresh interpreter with its tree first on ``sys.path``, pinned to one CPU; within a round the
three run one after the other, so the machine's load falls on all alike. Reported: the median,
the least and the range over rounds of CPU microseconds per request (CPU time, not wall time:
on a shared machine the time a process waits for a core is not its cost).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MEASURE = r"""
import asyncio, json, sys, time
import httpx2
from mcpauth import jwt
from mcpauth.middleware import JWTVerifier, ProtectedResourceMiddleware, ScopePolicy

MODE, REQUESTS = sys.argv[1], int(sys.argv[2])
if MODE == "on":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)

if MODE == "unhooked":  # the request path as before traces: _http called directly
    from mcpauth.middleware.protected_resource import ProtectedResourceMiddleware as Middleware

    hooked = Middleware.__call__

    async def unhooked(self, scope, receive, send):
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        else:
            await hooked(self, scope, receive, send)

    Middleware.__call__ = unhooked

ISSUER, RESOURCE = "https://as.example.com", "https://mcp.example.com/mcp"
key = jwt.generate_private_key("ES256")
documents = {
    "/.well-known/oauth-authorization-server": {"issuer": ISSUER, "jwks_uri": ISSUER + "/jwks"},
    "/jwks": {"keys": [jwt.public_jwk(key.public_key(), kid="k1", alg="ES256")]},
}
http = httpx2.AsyncClient(transport=httpx2.MockTransport(
    lambda request: httpx2.Response(200, json=documents[request.url.path])))
now = int(time.time())
token = jwt.encode({"iss": ISSUER, "sub": "alice", "aud": RESOURCE, "client_id": "c1",
                    "scope": "mcp:basic files:write", "iat": now, "exp": now + 3600, "jti": "j1"},
                   key, alg="ES256", kid="k1", typ="at+jwt")

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})

middleware = ProtectedResourceMiddleware(
    app, resource=RESOURCE, authorization_servers=[ISSUER],
    verifier=JWTVerifier(ISSUER, RESOURCE, http=http),
    policy=ScopePolicy(required="mcp:basic", tools={"delete_file": "files:write"}))
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "delete_file", "arguments": {"path": "/x"}}}).encode()
headers = [(b"host", b"mcp.example.com"), (b"content-type", b"application/json"),
           (b"content-length", str(len(body)).encode()),
           (b"authorization", b"Bearer " + token.encode())]
template = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "https", "path": "/mcp", "raw_path": b"/mcp", "query_string": b"",
            "root_path": "", "server": ("mcp.example.com", 443), "client": ("127.0.0.1", 5000)}

async def receive():
    return {"type": "http.request", "body": body, "more_body": False}

statuses = []
async def send(message):
    if message["type"] == "http.response.start":
        statuses.append(message["status"])

async def main():
    for _ in range(200):  # warm: the keys fetched, the token verified and cached
        await middleware({**template, "headers": list(headers)}, receive, send)
    started = time.process_time()  # CPU time: time spent descheduled is not counted
    for _ in range(REQUESTS):
        await middleware({**template, "headers": list(headers)}, receive, send)
    return time.process_time() - started

elapsed = asyncio.run(main())
assert set(statuses) == {200}, set(statuses)
print(json.dumps({"us_per_request": elapsed / REQUESTS * 1e6}))
"""


def measure(tree: Path, mode: str, requests: int, cpu: int) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(tree)
    done = subprocess.run(
        ["taskset", "-c", str(cpu), sys.executable, "-c", MEASURE, mode, str(requests)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return float(json.loads(done.stdout.strip().splitlines()[-1])["us_per_request"])


@contextmanager
def base_tree(args: argparse.Namespace) -> Iterator[Path]:
    if args.base is not None:
        yield args.base
        return
    with tempfile.TemporaryDirectory(prefix="mcpauth-base-") as tmp:
        tree = Path(tmp) / "tree"
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-ref", default="main")
    parser.add_argument("--base", type=Path, help="a tree to measure as the base instead")
    parser.add_argument("--head", type=Path, default=ROOT)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cpu", type=int, default=0)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with base_tree(args) as base:
        variants = {
            "base": (base, "off"),
            "head, off, without the hook": (args.head, "unhooked"),
            "head, off": (args.head, "off"),
            "head, on": (args.head, "on"),
        }
        results: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, (tree, mode) in variants.items():
                results[name].append(measure(tree, mode, args.requests, args.cpu))
        labels = {"base": _label(base), "head": _label(args.head)}
    print(
        f"rounds: {args.rounds} x {args.requests} requests; {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, pinned to CPU {args.cpu}; load average before/after: "
        f"{load:.1f}/{os.getloadavg()[0]:.1f}"
    )
    print(f"base: {labels['base']}; head: {labels['head']}\n")
    print("| variant | median CPU µs/request | least | rounds |")
    print("|---|---|---|---|")
    for name, values in results.items():
        print(
            f"| {name} | {statistics.median(values):.1f} | {min(values):.1f} "
            f"| {', '.join(f'{v:.1f}' for v in values)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
