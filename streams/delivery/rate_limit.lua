-- Grant or deny a batch of sends through one provider credential, in order (GCRA).
--
-- Keys and arguments: ``streams.delivery.rate_limiter.rate_limit_call`` lays them out.
-- KEYS: total bucket, NORMAL bucket, LOW bucket (one hash tag: one slot)
-- ARGV: per_second, burst, normal_share, low_share,
--       the requests' priorities as one string, a letter each: H(IGH), N(ORMAL), L(OW)
--
-- Reply: one integer per request, in order: 0 when granted, else the microseconds until it
-- would be granted. A denied request changes nothing.
--
-- Each bucket stores its theoretical arrival time (TAT, microseconds on the Redis clock):
-- the moment its backlog of granted requests will have drained at its rate. A request adds
-- one interval to the backlog and is granted while the backlog stays within the limit.
--   total: interval 1/r; limit burst intervals for HIGH, max(1, share * burst) for the
--          others, so the top of the burst window is left to HIGH whenever the total is
--          near its limit.
--   NORMAL, LOW: interval 1/(share * r), limit max(1, share * burst) intervals; HIGH has
--          no bucket of its own.
-- A key matters only until its TAT (an older TAT means an empty backlog), so it expires
-- shortly after.
--
-- The clock is Redis's TIME, shared by every worker process whatever their own clocks say.

local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local shares = { N = tonumber(ARGV[3]), L = tonumber(ARGV[4]) }
local priorities = ARGV[5]

-- TIME has a resolution of 1 us, so a wait shorter than that is rounding noise (a burst of
-- `burst` at one instant would otherwise lose its last request to float error).
local RESOLUTION = 1
-- Kept this long after the TAT: a little slack for clocks of replicas after a failover.
local EXPIRE_SLACK_MS = 1000

local now = now_us()
local interval = 1000000 / rate

local limits = { H = burst * interval }
local class_interval, class_limit = {}, {}
for class, share in pairs(shares) do
  local class_burst = math.max(1, share * burst)
  limits[class] = class_burst * interval
  class_interval[class] = interval / share
  class_limit[class] = class_burst * class_interval[class]
end

-- Backlogs relative to now, not absolute TATs: near 1.8e15 us a double is only exact to
-- 0.25 us, small numbers add up exactly.
local function backlog_of(stored)
  local tat = tonumber(stored)
  if not tat or tat <= now then
    return 0
  end
  return tat - now
end

local stored = redis.call("MGET", KEYS[1], KEYS[2], KEYS[3])
local total = backlog_of(stored[1])
local class_backlog = { N = backlog_of(stored[2]), L = backlog_of(stored[3]) }
local changed = { total = false, N = false, L = false }

local replies = {}
for i = 1, #priorities do
  local class = string.sub(priorities, i, i)
  local limit = limits[class]
  if not limit then
    return redis.error_reply("unknown priority letter " .. class)
  end
  local total_after = total + interval
  local wait = total_after - limit
  local class_after
  if class ~= "H" then
    class_after = class_backlog[class] + class_interval[class]
    wait = math.max(wait, class_after - class_limit[class])
  end
  if wait <= RESOLUTION then
    total, changed.total = total_after, true
    if class_after then
      class_backlog[class], changed[class] = class_after, true
    end
    replies[i] = 0
  else
    replies[i] = math.ceil(wait)
  end
end

local function store(key, backlog)
  -- %.17g keeps every bit of the double (tostring keeps only 14 digits).
  local tat = string.format("%.17g", now + backlog)
  redis.call("SET", key, tat, "PX", math.ceil(backlog / 1000) + EXPIRE_SLACK_MS)
end

if changed.total then
  store(KEYS[1], total)
end
if changed.N then
  store(KEYS[2], class_backlog.N)
end
if changed.L then
  store(KEYS[3], class_backlog.L)
end
return replies
