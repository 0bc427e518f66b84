-- wrk script for bench/postgres/run.py: POST one pre-built token request body per request, each
-- used once (codes and refresh tokens are single use). One wrk thread (-t1).
--   BENCH_INPUT   file with one form-encoded body per line
--   BENCH_PATH    the token endpoint's path
--   BENCH_OUTPUT  optional: refresh tokens from 200 responses are written here
-- When the bodies run out the script sends GET /health and counts `exhausted` (run.py then
-- rejects the run).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"

local path = os.getenv("BENCH_PATH") or "/token"
local health = path:gsub("/token$", "/health")
local bodies = {}
local next_body = 1
local out = nil

ok = 0
bad = 0
exhausted = 0
first_error = ""

function setup(thread)
  threads = threads or {}
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(os.getenv("BENCH_INPUT")) do
    if line ~= "" then
      bodies[#bodies + 1] = line
    end
  end
  local name = os.getenv("BENCH_OUTPUT")
  if name and name ~= "" then
    out = io.open(name, "w")
  end
end

function request()
  local body = bodies[next_body]
  if body == nil then
    exhausted = exhausted + 1
    return wrk.format("GET", health, {}, nil)
  end
  next_body = next_body + 1
  return wrk.format(nil, path, nil, body)
end

function response(status, headers, body)
  if status == 200 then
    if body:match('"access_token"') then
      ok = ok + 1
      local token = body:match('"refresh_token"%s*:%s*"([^"]+)"')
      if token ~= nil and out then
        out:write(token, "\n")
        out:flush()
      end
    end
  else
    bad = bad + 1
    if first_error == "" then
      first_error = (tostring(status) .. " " .. body:sub(1, 200)):gsub("[%c\\\"]", " ")
    end
  end
end

function done(summary, latency, requests)
  local ok_total, bad_total, exhausted_total, err = 0, 0, 0, ""
  for _, thread in ipairs(threads) do
    ok_total = ok_total + thread:get("ok")
    bad_total = bad_total + thread:get("bad")
    exhausted_total = exhausted_total + thread:get("exhausted")
    if err == "" then
      err = thread:get("first_error")
    end
  end
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "ok": %d, "bad": %d, "exhausted": %d, '
      .. '"socket_errors": %d, "p50_us": %d, "p99_us": %d, "first_error": %q}\n',
    summary.requests, summary.duration, ok_total, bad_total, exhausted_total,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), err))
end
