"""The in-process half of the DPoP benchmark, run as a script so that it measures the mcpauth
first on PYTHONPATH (this checkout, or a baseline checkout's): median microseconds to make a
proof (the client), to check one (the server, without the replay record), one bare ES256
verification (also with the caches cold) and one insert into the replay record (the floor of a
check), and the middleware's own time on a Bearer and on a DPoP request (a cached token, a
trivial app, no HTTP server); then the replay record under sustained load (a thousand proofs a
second for MAX_AGE + CLOCK_SKEW seconds): an insert while proofs expire as fast as they come,
the objects of it a full garbage collection visits, and its memory. Prints one JSON object.

    PYTHONPATH=CHECKOUT .venv/bin/python bench/dpop/inprocess.py [N]
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import resource
import secrets
import statistics
import sys
import time
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils

from mcpauth import jwt
from mcpauth.dpop import CLOCK_SKEW, MAX_AGE, MemoryReplayCache, check_proof, make_proof

URL = "https://mcp.example.com/mcp"
TOKEN = "t" * 600


async def proof_costs(n: int) -> dict[str, float]:
    """Make, check (with ``ath`` and the key binding), a bare ES256 verification of the same
    proof, and a replay-record insert, each a median over ``n`` proofs."""
    key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(key.public_key(), kid="", alg="ES256"))
    public = key.public_key()
    record = MemoryReplayCache(max_entries=n + 1)
    ecdsa = ec.ECDSA(hashes.SHA256())
    made, checked, verified, inserted = [], [], [], []
    for _ in range(n):
        t0 = time.perf_counter()
        proof = make_proof(key, alg="ES256", method="POST", url=URL, access_token=TOKEN)
        t1 = time.perf_counter()
        result = check_proof([proof], method="POST", url=URL, access_token=TOKEN, jkt=jkt)
        t2 = time.perf_counter()
        head, payload, signature = proof.split(".")
        raw = base64.urlsafe_b64decode(signature + "==")
        r, s = int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
        public.verify(utils.encode_dss_signature(r, s), f"{head}.{payload}".encode(), ecdsa)
        t3 = time.perf_counter()
        fresh = await record.first_use(result.replay_key, result.expires_at)
        t4 = time.perf_counter()
        if not fresh:
            raise SystemExit("a new proof was taken for a replay")
        made.append(t1 - t0)
        checked.append(t2 - t1)
        verified.append(t3 - t2)
        inserted.append(t4 - t3)
    # the same verification with the caches cold, as in a server where other work runs
    # between two requests: Python code touches 4 MiB before each
    junk = bytearray(4 * 1024 * 1024)
    cold = []
    for _ in range(max(50, n // 20)):
        for i in range(0, len(junk), 64):
            junk[i] ^= 1
        t0 = time.perf_counter()
        public.verify(utils.encode_dss_signature(r, s), f"{head}.{payload}".encode(), ecdsa)
        cold.append(time.perf_counter() - t0)
    return {
        "es256_verify_cold": statistics.median(cold) * 1e6,
        "make": statistics.median(made) * 1e6,
        "check": statistics.median(checked) * 1e6,
        "es256_verify": statistics.median(verified) * 1e6,
        "replay_insert": statistics.median(inserted) * 1e6,
        "proof_bytes": len("DPoP: \r\n") + len(proof),
    }


async def _middleware_times(n: int) -> dict[str, float]:
    from mcpauth.middleware import ProtectedResourceMiddleware, ScopePolicy, VerifiedToken

    client_key = ec.generate_private_key(ec.SECP256R1())
    jkt = jwt.thumbprint(jwt.public_jwk(client_key.public_key(), kid="", alg="ES256"))

    class Verifier:
        def __init__(self, bound: bool) -> None:
            self.claims = {"cnf": {"jkt": jkt}} if bound else {}

        async def verify_token(self, raw: str) -> VerifiedToken:
            return VerifiedToken(
                subject="bench", client_id="bench", scopes=("mcp:basic",),
                expires_at=int(time.time()) + 3600, issuer="https://as.example.com",
                resource=URL, claims=self.claims,
            )  # fmt: skip

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    statuses: list[int] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    times: dict[str, float] = {}
    for scheme in ("Bearer", "DPoP"):
        protected = ProtectedResourceMiddleware(
            app,
            resource=URL,
            authorization_servers=["https://as.example.com"],
            verifier=Verifier(scheme == "DPoP"),
            policy=ScopePolicy(required="mcp:basic"),
        )
        proofs = [
            make_proof(client_key, alg="ES256", method="POST", url=URL, access_token=TOKEN)
            for _ in range(n if scheme == "DPoP" else 0)
        ]
        spent = []
        for i in range(n):
            headers = [(b"host", b"mcp.example.com"), (b"content-type", b"application/json")]
            headers.append((b"authorization", f"{scheme} {TOKEN}".encode()))
            if proofs:
                headers.append((b"dpop", proofs[i].encode()))
            scope = {"type": "http", "method": "POST", "path": "/mcp", "raw_path": b"/mcp",
                     "headers": headers, "query_string": b""}  # fmt: skip
            t0 = time.perf_counter()
            await protected(scope, receive, send)
            spent.append(time.perf_counter() - t0)
        times[scheme] = statistics.median(spent) * 1e6
    if set(statuses) != {200}:
        raise SystemExit(f"the in-process middleware answered {sorted(set(statuses))}")
    return times


def _resident_mib() -> float:
    """This process's resident memory now (not its peak)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _collector_visits(record: MemoryReplayCache) -> int:
    """How many objects the garbage collector visits when it walks the record's state: the
    referents of each object it tracks, from the record's attributes down (types left out)."""
    visits, seen = 0, set()
    pending: list[Any] = [vars(record)]
    while pending:
        for referent in gc.get_referents(pending.pop()):
            visits += 1
            tracked = not isinstance(referent, type) and gc.is_tracked(referent)
            if tracked and id(referent) not in seen:
                seen.add(id(referent))
                pending.append(referent)
    return visits


async def sustained_record(rate: int = 1000, inserts: int = 2000) -> dict[str, float]:
    """A record holding ``MAX_AGE + CLOCK_SKEW`` seconds of ``rate`` proofs a second (room made
    for them: the default bound is 100,000), expiring at that rate from now on; then
    ``inserts`` proofs at that rate in real time, as a server sees them, each after 4 MiB have
    been copied (as in a server, other work runs between two proofs); the mean CPU time
    (dropping expired entries comes in bursts). Also how many objects of the record a full
    collection of the garbage collector visits (its CPU time is too noisy to read on a shared
    machine), and the record's memory."""
    window = MAX_AGE + CLOCK_SKEW
    keys = [secrets.token_urlsafe(32) for _ in range(rate * window + inserts)]
    resident = _resident_mib()
    record = MemoryReplayCache(max_entries=2 * rate * window)
    start = time.time()
    for i in range(rate * window):
        await record.first_use(keys[i], int(start + i / rate) + 1)
    grown = _resident_mib() - resident
    visits = _collector_visits(record)
    spent = []
    junk, copy = bytearray(4 * 1024 * 1024), bytearray(4 * 1024 * 1024)
    begin = time.perf_counter()
    for i in range(inserts):
        copy[:] = junk  # well under the 1 ms between two proofs
        while time.perf_counter() < begin + i / rate:
            pass
        key = keys[rate * window + i]
        t0 = time.thread_time_ns()
        fresh = await record.first_use(key, int(time.time()) + window)
        spent.append(time.thread_time_ns() - t0)
        if not fresh:
            raise SystemExit("a new proof was taken for a replay")
    return {
        "replay_insert_sustained": statistics.mean(spent) / 1e3,
        "replay_gc_visits": float(visits),
        "replay_mib": grown,
        "replay_entries": float(len(record)),
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    costs = asyncio.run(proof_costs(n))
    times = asyncio.run(_middleware_times(n))
    times = {"middleware_bearer": times["Bearer"], "middleware_dpop": times["DPoP"]}
    sustained = asyncio.run(sustained_record())
    print(json.dumps(costs | times | sustained))


if __name__ == "__main__":
    main()
