-- wrk script for bench/postgres/run.py (one wrk per replica, each -t1): POST one pre-built token
-- request body per request, each used once; BENCH_INPUT, BENCH_PATH and BENCH_OUTPUT as
-- described at single_use_bodies() in ../common.lua.
local bench = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/../common.lua")
bench.single_use_bodies()

function done(summary, latency, requests)
  bench.report(summary, latency, {"requests", "duration_us", "ok", "bad", "exhausted",
    "socket_errors", "p50_us", "p99_us", "first_error"})
end
