-- wrk script: one stateless MCP tools/call per request with Authorization: DPoP $BENCH_TOKEN and
-- a DPoP proof of its own, taken in turn from the file $BENCH_PROOFS (one proof per line, each
-- made for this URL and token: single use, so the file holds more proofs than requests).
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}'
local token = os.getenv("BENCH_TOKEN")
local proofs = {}
for line in io.lines(os.getenv("BENCH_PROOFS")) do
  proofs[#proofs + 1] = line
end
local next_proof = 0

function request()
  next_proof = next_proof + 1
  local headers = {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["MCP-Protocol-Version"] = "2025-06-18",
    ["Authorization"] = "DPoP " .. token,
    ["DPoP"] = proofs[(next_proof - 1) % #proofs + 1],
  }
  return wrk.format(nil, nil, headers, nil)
end

function done(summary, latency, requests)
  io.write(string.format("BENCH requests=%d non2xx=%d errors=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
