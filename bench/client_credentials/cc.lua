-- wrk script for bench/client_credentials/run.py: every request is the same client_credentials
-- token request with HTTP Basic client authentication.
--   BENCH_AUTH   the Authorization header value ("Basic ...")
--   BENCH_BODY   the form-encoded body
-- A response counts as ok only when it is a 200 carrying an access_token.
local bench = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/../common.lua")

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = os.getenv("BENCH_AUTH")
wrk.body = os.getenv("BENCH_BODY")

setup = bench.setup

function response(status, headers, body)
  if status == 200 and body:find('"access_token"', 1, true) then
    ok = ok + 1
  else
    bench.fail(status, body)
  end
end

function done(summary, latency, requests)
  bench.report(summary, latency, {"requests", "duration_us", "ok", "bad", "socket_errors",
    "p50_us", "p90_us", "p99_us", "mean_us", "max_us", "first_error"})
end
