-- Take a producer's ingest quota for one HTTP request of ``count`` notifications, or say how
-- long until it would fit (GCRA, as ``rate_limit.lua``, with a cost per request).
--
-- Keys and arguments: ``streams.ingest.quota.ingest_quota_call`` lays them out.
-- KEYS: the producer's requests bucket, notifications bucket (one hash tag: one slot)
-- ARGV: requests per second, requests burst, notifications per second, notifications
--       burst (a rate of 0: that one is not limited), the request's notification count
--
-- Reply: 0 when both quotas took the request, else the milliseconds until both would; a
-- refused request takes nothing from either.
--
-- A bucket stores its theoretical arrival time (TAT, microseconds on the Redis clock): when
-- the backlog it granted will have drained at its rate. A request of cost c adds c intervals
-- to the backlog and fits while the backlog stays within burst intervals.

local now = now_us()
local count = tonumber(ARGV[5])
-- Kept this long after the TAT: a little slack for clocks of replicas after a failover.
local EXPIRE_SLACK_MS = 1000

-- The bucket's backlog after this request (us) and the wait (us) before it would fit.
local function after(key, rate, burst, cost)
  local interval = 1000000 / rate
  local tat = tonumber(redis.call("GET", key) or 0) or 0
  local backlog = math.max(0, tat - now) + cost * interval
  return backlog, backlog - burst * interval
end

local buckets = {
  { KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), 1 },
  { KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]), count },
}
local wait, backlogs = 0, {}
for i, bucket in ipairs(buckets) do
  local key, rate, burst, cost = bucket[1], bucket[2], bucket[3], bucket[4]
  if rate > 0 then
    local backlog, over = after(key, rate, burst, cost)
    backlogs[i] = backlog
    wait = math.max(wait, over)
  end
end
if wait > 1 then -- TIME has a resolution of 1 us: anything less is rounding noise
  return math.ceil(wait / 1000)
end
for i, bucket in ipairs(buckets) do
  if backlogs[i] then
    -- %.17g keeps every bit of the double (tostring keeps only 14 digits).
    redis.call("SET", bucket[1], string.format("%.17g", now + backlogs[i]),
      "PX", math.ceil(backlogs[i] / 1000) + EXPIRE_SLACK_MS)
  end
end
return 0
