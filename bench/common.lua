-- Shared by the wrk scripts under bench/ (token/token.lua, postgres/token.lua,
-- client_credentials/cc.lua). A script loads it from its own directory's parent:
--
--   local bench = dofile((debug.getinfo(1, "S").source:match("^@(.*)/") or ".") .. "/../common.lua")
--
-- (wrk 4.1 loads its -s script with luaL_dofile, so the chunk's source is "@" and the path
-- given to -s; dofile then finds this file wherever wrk was started from.)
--
-- The counters are globals of each thread's Lua state, read back in done() with thread:get:
--   ok           responses that count (each script decides what counts)
--   bad          responses that do not, with first_error the first one's status and body start
--   exhausted    requests sent after a script's pre-built bodies ran out (single_use_bodies)
local M = {}

local threads = {}

ok = 0
bad = 0
exhausted = 0
first_error = ""

-- wrk's setup(thread): remember every thread, for report().
function M.setup(thread)
  table.insert(threads, thread)
end

-- Count one failed response: bad, and first_error if it is the first.
function M.fail(status, body)
  bad = bad + 1
  if first_error == "" then
    first_error = (tostring(status) .. " " .. body:sub(1, 200)):gsub("[%c\\\"]", " ")
  end
end

local function total(name)
  local sum = 0
  for _, thread in ipairs(threads) do
    sum = sum + thread:get(name)
  end
  return sum
end

local function first_error_of_threads()
  for _, thread in ipairs(threads) do
    local err = thread:get("first_error")
    if err ~= "" then
      return err
    end
  end
  return ""
end

-- Each field the BENCH line can carry, formatted as a JSON value.
local FIELDS = {
  requests = function(s, l) return string.format("%d", s.requests) end,
  duration_us = function(s, l) return string.format("%d", s.duration) end,
  ok = function(s, l) return string.format("%d", total("ok")) end,
  bad = function(s, l) return string.format("%d", total("bad")) end,
  exhausted = function(s, l) return string.format("%d", total("exhausted")) end,
  socket_errors = function(s, l)
    local e = s.errors
    return string.format("%d", e.connect + e.read + e.write + e.timeout)
  end,
  p50_us = function(s, l) return string.format("%d", l:percentile(50)) end,
  p90_us = function(s, l) return string.format("%d", l:percentile(90)) end,
  p99_us = function(s, l) return string.format("%d", l:percentile(99)) end,
  p999_us = function(s, l) return string.format("%d", l:percentile(99.9)) end,
  mean_us = function(s, l) return string.format("%.1f", l.mean) end,
  max_us = function(s, l) return string.format("%d", l.max) end,
  first_error = function(s, l) return string.format("%q", first_error_of_threads()) end,
}

-- From wrk's done(summary, latency, requests): print one line `BENCH {"field": value, ...}`
-- with the named fields in the given order (the runners parse it as JSON).
function M.report(summary, latency, fields)
  local parts = {}
  for _, name in ipairs(fields) do
    parts[#parts + 1] = string.format('"%s": %s', name, FIELDS[name](summary, latency))
  end
  io.write("BENCH {" .. table.concat(parts, ", ") .. "}\n")
end

-- Install wrk's callbacks for POSTing pre-built token request bodies, each used exactly once
-- (codes and refresh tokens are single use). Run with one wrk thread (-t1): the bodies are not
-- partitioned between threads.
--   BENCH_INPUT   file with one form-encoded body per line
--   BENCH_PATH    the token endpoint's path
--   BENCH_OUTPUT  optional: refresh tokens from 200 responses are written here
-- A 200 carrying a refresh_token or an access_token counts as ok, anything but a 200 as bad.
-- When the bodies run out the script sends GET /health instead and counts it as `exhausted`
-- (its 200 counts as neither; the run is then invalid: the runner mints more and retries).
function M.single_use_bodies()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"

  local path = os.getenv("BENCH_PATH") or "/token"
  local health = path:gsub("/token$", "/health")
  local bodies = {}
  local next_body = 1
  local out = nil

  setup = M.setup

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
      local token = body:match('"refresh_token"%s*:%s*"([^"]+)"')
      if token ~= nil then
        ok = ok + 1
        if out then
          out:write(token, "\n")
          out:flush()
        end
      elseif body:match('"access_token"') then
        ok = ok + 1
      end
    else
      M.fail(status, body)
    end
  end
end

return M
