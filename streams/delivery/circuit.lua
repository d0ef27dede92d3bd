-- A provider's circuit breaker, shared by every worker process (``streams/delivery/circuit_breaker.py``).
--
-- KEYS[1]: the provider's circuit hash. Fields: state (closed | open | half_open),
--   until_ms (open: when it may be probed), probe_until_ms (half_open: the probe's lease),
--   opened (how often it opened), c:<bucket> and f:<bucket> (calls and TRANSIENT failures
--   counted in the bucket that starts at <bucket> seconds).
-- ARGV: operation, failure_share, min_calls, window_s, open_ms, then per operation:
--   report <calls> <failures>: add a worker's counts (closed only) and decide whether to open;
--   probe <lease_ms>: claim the one probe of a half-open circuit;
--   probe_done <ok: 1 | 0>: the probe's answer closes the circuit or opens it again.
-- Reply: {state, until_ms, calls in window, failures in window, opened, granted (probe: 1 | 0)}
--
-- Counts live in about ten buckets per window, so a report reads a handful of fields, and
-- a bucket older than the window is deleted by the next report that sees it. The clock is
-- Redis's TIME: every worker agrees on when a circuit opened.

local key = KEYS[1]
local operation = ARGV[1]
local failure_share, min_calls = tonumber(ARGV[2]), tonumber(ARGV[3])
local window_s, open_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local bucket_s = math.max(1, math.floor(window_s / 10))

local fields = redis.call("HGETALL", key)
local state, until_ms, probe_until, opened = "closed", 0, 0, 0
local buckets = {}
for i = 1, #fields, 2 do
  local name, value = fields[i], fields[i + 1]
  if name == "state" then state = value
  elseif name == "until_ms" then until_ms = tonumber(value)
  elseif name == "probe_until_ms" then probe_until = tonumber(value)
  elseif name == "opened" then opened = tonumber(value)
  else
    local kind, start = string.match(name, "^([cf]):(%d+)$")
    if kind then
      buckets[start] = buckets[start] or { c = 0, f = 0 }
      buckets[start][kind] = tonumber(value)
    end
  end
end

-- An open circuit whose time is up lets one probe through.
if state == "open" and now >= until_ms then
  state = "half_open"
  probe_until = 0
end

local function open()
  state, until_ms, probe_until, opened = "open", now + open_ms, 0, opened + 1
end

local function clear_counts()
  for start, _ in pairs(buckets) do
    redis.call("HDEL", key, "c:" .. start, "f:" .. start)
  end
  buckets = {}
end

local granted = 0
local oldest = math.floor(now / 1000) - window_s
if operation == "report" then
  local calls, failures = tonumber(ARGV[6]), tonumber(ARGV[7])
  if state == "closed" and calls > 0 then
    local start = tostring(math.floor(now / 1000 / bucket_s) * bucket_s)
    redis.call("HINCRBY", key, "c:" .. start, calls)
    if failures > 0 then redis.call("HINCRBY", key, "f:" .. start, failures) end
    buckets[start] = buckets[start] or { c = 0, f = 0 }
    buckets[start].c = buckets[start].c + calls
    buckets[start].f = buckets[start].f + failures
  end
elseif operation == "probe" then
  if state == "half_open" and now >= probe_until then
    probe_until = now + tonumber(ARGV[6])
    granted = 1
  end
elseif operation == "probe_done" then
  if state == "half_open" then
    if ARGV[6] == "1" then
      state, probe_until = "closed", 0
      clear_counts()
    else
      open()
    end
  end
end

local calls, failures = 0, 0
for start, counts in pairs(buckets) do
  if tonumber(start) < oldest then
    redis.call("HDEL", key, "c:" .. start, "f:" .. start)
  else
    calls, failures = calls + counts.c, failures + counts.f
  end
end
if state == "closed" and calls >= min_calls and failures >= failure_share * calls then
  open()
  clear_counts()
  calls, failures = 0, 0
end

redis.call("HSET", key, "state", state, "until_ms", until_ms, "probe_until_ms", probe_until,
  "opened", opened)
-- Nothing here matters once a closed circuit's window has passed without calls.
redis.call("PEXPIRE", key, math.max(window_s * 1000, open_ms) * 2 + 60000)
return { state, until_ms, calls, failures, opened, granted, probe_until }
