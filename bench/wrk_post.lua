-- wrk script for bench/ingest.py: POST one notification per request to the URL given to wrk.
--
-- Every request carries a unique Idempotency-Key (<run tag>-<thread>-<counter>), so the
-- service writes each one instead of answering a replay. Each thread counts the responses that
-- are not 202 and keeps the first one; done() prints one JSON line, prefixed by BENCH_RESULT,
-- that bench/ingest.py parses.
--
-- Usage: wrk -t2 -c64 -d10s --latency -s bench/wrk_post.lua http://host:port/path -- <run tag>

local threads = {}

-- Runs in the main thread, once per wrk thread, before init().
function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

local key_prefix
local counter = 0
non_2xx = 0
non_202 = 0
first_status = 0
first_body = ""

local headers = {
  ["Authorization"] = "Bearer bench-secret-key",
  ["Content-Type"] = "application/json",
}
local body_head = '{"recipient": {"id": "user-'
local body_mid = '", "phone": "+4915112345678", "email": "user@example.com"}, '
  .. '"type": "order_confirmed", "data": {"order_id": "'
local body_tail = '"}}'

function init(args)
  local tag = args[1] or "run"
  key_prefix = tag .. "-" .. thread_id .. "-"
end

function request()
  counter = counter + 1
  local n = tostring(counter)
  headers["Idempotency-Key"] = key_prefix .. n
  return wrk.format("POST", nil, headers, body_head .. n .. body_mid .. n .. body_tail)
end

function response(status, _, body)
  if status ~= 202 then
    non_202 = non_202 + 1
    if status < 200 or status > 299 then
      non_2xx = non_2xx + 1
    end
    if first_status == 0 then
      first_status = status
      first_body = string.sub(body or "", 1, 500)
    end
  end
end

-- A JSON string literal; control characters, quotes and backslashes become \u escapes.
local function json_string(text)
  local escaped = string.gsub(text, '[%c"\\]', function(c)
    return string.format("\\u%04x", string.byte(c))
  end)
  return '"' .. escaped .. '"'
end

function done(summary, latency, _)
  local bad_2xx, bad_202, status, body = 0, 0, 0, ""
  for _, thread in ipairs(threads) do
    bad_2xx = bad_2xx + thread:get("non_2xx")
    bad_202 = bad_202 + thread:get("non_202")
    if status == 0 and thread:get("first_status") ~= 0 then
      status, body = thread:get("first_status"), thread:get("first_body")
    end
  end
  local errors = summary.errors
  local seconds = summary.duration / 1e6
  io.write(string.format(
    'BENCH_RESULT {"requests": %d, "duration_s": %.6f, "requests_per_s": %.2f, '
      .. '"latency_mean_ms": %.3f, "latency_p50_ms": %.3f, "latency_p99_ms": %.3f, '
      .. '"latency_max_ms": %.3f, "non_2xx": %d, "non_202": %d, '
      .. '"socket_errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d}, '
      .. '"first_unexpected_status": %d, "first_unexpected_body": %s}\n',
    summary.requests, seconds, summary.requests / seconds,
    latency.mean / 1000, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000, bad_2xx, bad_202,
    errors.connect, errors.read, errors.write, errors.timeout,
    status, json_string(body)
  ))
end
