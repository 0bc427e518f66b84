-- wrk script for bench/dpop/run.py: the same small JSON-RPC POST on every request, with
--   BENCH_SCHEME  "Bearer" or "DPoP" (empty: no Authorization header)
--   BENCH_TOKEN   the access token
--   BENCH_PROOFS  optional: a file of DPoP proofs, one per line, each made for this URL and token
--                 and sent once (proofs are single use); when they run out the request goes
--                 without one and counts as `exhausted` (the run is then invalid)
-- A 200 counts as ok, anything else as bad. Run with one wrk thread (-t1).
local bench = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/../common.lua")

local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}'
local scheme = os.getenv("BENCH_SCHEME") or ""
local token = os.getenv("BENCH_TOKEN") or ""
local proofs = {}
local next_proof = 0

setup = bench.setup

function init(args)
  local name = os.getenv("BENCH_PROOFS")
  if name and name ~= "" then
    for line in io.lines(name) do
      if line ~= "" then
        proofs[#proofs + 1] = line
      end
    end
  end
end

function request()
  local headers = {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
  }
  if scheme ~= "" then
    headers["Authorization"] = scheme .. " " .. token
  end
  if #proofs > 0 then
    next_proof = next_proof + 1
    if next_proof <= #proofs then
      headers["DPoP"] = proofs[next_proof]
    else
      exhausted = exhausted + 1
    end
  end
  return wrk.format("POST", nil, headers, body)
end

function response(status, headers, body)
  if status == 200 then
    ok = ok + 1
  else
    bench.fail(status, body)
  end
end

function done(summary, latency, requests)
  bench.report(summary, latency, {"requests", "duration_us", "ok", "bad", "exhausted",
    "socket_errors", "p50_us", "p99_us", "mean_us", "first_error"})
end
