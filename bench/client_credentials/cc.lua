-- wrk script for bench/client_credentials/run.py: every request is the same client_credentials
-- token request with HTTP Basic client authentication.
--   BENCH_AUTH   the Authorization header value ("Basic ...")
--   BENCH_BODY   the form-encoded body
-- A response counts as ok only when it is a 200 carrying an access_token.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = os.getenv("BENCH_AUTH")
wrk.body = os.getenv("BENCH_BODY")

ok = 0
bad = 0
first_error = ""

function setup(thread)
  threads = threads or {}
  table.insert(threads, thread)
end

function response(status, headers, body)
  if status == 200 and body:find('"access_token"', 1, true) then
    ok = ok + 1
  else
    bad = bad + 1
    if first_error == "" then
      first_error = (tostring(status) .. " " .. body:sub(1, 200)):gsub("[%c\\\"]", " ")
    end
  end
end

function done(summary, latency, requests)
  local ok_total, bad_total, err = 0, 0, ""
  for _, thread in ipairs(threads) do
    ok_total = ok_total + thread:get("ok")
    bad_total = bad_total + thread:get("bad")
    if err == "" then
      err = thread:get("first_error")
    end
  end
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "ok": %d, "bad": %d, '
      .. '"socket_errors": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, '
      .. '"mean_us": %.1f, "max_us": %d, "first_error": %q}\n',
    summary.requests, summary.duration, ok_total, bad_total,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.mean, latency.max, err))
end
