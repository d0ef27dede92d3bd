-- Count deliveries against one recipient's throttles, in order (sliding-window logs).
--
-- Keys and arguments: ``streams.delivery.throttles.throttle_call`` lays them out.
-- KEYS: the recipient's logs this call touches (one hash tag, ``{thr:<recipient>}``: one slot)
-- ARGV: per request, four arguments: the number of its log in KEYS, its limit, its window
--       (ms) and its delivery id
--
-- Reply: one integer per request, in order: 0 when allowed, else the milliseconds until the
-- oldest entry counted in its window leaves it (when it would be allowed; other deliveries
-- may take the place first). A refused request changes nothing.
--
-- A log is a sorted set of delivery ids scored by the time (ms) each was allowed. A delivery
-- already in it is allowed again without counting again (a retry, a deferral by the
-- provider's quota, a lease taken over). Otherwise the entries that left the window are
-- dropped and, while fewer than the limit remain, it is added. A log expires one window after
-- its newest entry, when none of its entries counts any more.
--
-- The clock is Redis's TIME, shared by every worker process whatever their own clocks say.

local now = now_ms()
local replies = {}
local next_argument = arguments(1)
local requests = #ARGV / 4
for i = 1, requests do
  local key = KEYS[tonumber(next_argument())]
  local limit, window = tonumber(next_argument()), tonumber(next_argument())
  local delivery = next_argument()
  if redis.call("ZSCORE", key, delivery) then
    replies[i] = 0
  else
    redis.call("ZREMRANGEBYSCORE", key, "-inf", now - window)
    if redis.call("ZCARD", key) < limit then
      redis.call("ZADD", key, now, delivery)
      redis.call("PEXPIRE", key, window)
      replies[i] = 0
    else
      local oldest = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
      replies[i] = math.max(1, tonumber(oldest[2]) + window - now)
    end
  end
end
return replies
