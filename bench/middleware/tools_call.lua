-- wrk script for bench/middleware/run.py: one stateless MCP tools/call per request, with
--   BENCH_TOKEN   the bearer token (empty: no Authorization header)
-- A 200 counts as ok, anything else as bad. Run with one wrk thread (-t1).
local bench = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/../common.lua")

wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2025-06-18"
local token = os.getenv("BENCH_TOKEN")
if token and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end

setup = bench.setup

function response(status, headers, body)
  if status == 200 then
    ok = ok + 1
  else
    bench.fail(status, body)
  end
end

function done(summary, latency, requests)
  bench.report(summary, latency, {"requests", "duration_us", "ok", "bad", "socket_errors",
    "p50_us", "p99_us", "first_error"})
end
