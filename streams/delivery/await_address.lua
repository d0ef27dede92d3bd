-- Deliveries waiting for an address (``streams.delivery.address_waits``): the recipient's
-- index of their ``delayed`` members, kept by a worker each time one goes back to wait, and
-- emptied by a profile change, which makes every one of them due now.
--
-- Keys and arguments: ``streams.delivery.address_waits.await_address_call`` lays them out.
-- KEYS: the recipient's ``awaiting`` index, delayed, the recipient's settings hash (read by
--   "wait" only)
-- ARGV: "wait", the member (as ``delayed`` holds it), until when it may wait (ms), the
--   settings version the worker read the profile at, the most members an index keeps;
--   or "release"
-- Reply: "wait": 1 when the settings changed since the worker read them (the member is due
--   now), else 0; "release": how many members were made due now.
local index, delayed = KEYS[1], KEYS[2]
local now = now_ms()

-- Make a waiting member due now; only one still in ``delayed`` (one taken since is not).
local function due_now(member)
  return redis.call("ZADD", delayed, "XX", "CH", now, member)
end

if ARGV[1] == "release" then
  local released = 0
  for _, member in ipairs(redis.call("ZRANGE", index, 0, -1)) do
    released = released + due_now(member)
  end
  redis.call("DEL", index)
  return released
end

local member, until_ms, seen, most = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
-- Members whose wait is over left the index's business: their deliveries end or ended.
redis.call("ZREMRANGEBYSCORE", index, "-inf", now)
if redis.call("ZSCORE", index, member) or redis.call("ZCARD", index) < most then
  redis.call("ZADD", index, until_ms, member)
end
local last = redis.call("ZRANGE", index, -1, -1, "WITHSCORES")
if last[2] then
  redis.call("PEXPIREAT", index, math.floor(tonumber(last[2])) + 1000)
end
-- A profile change between the worker's read and now found nothing to release: due now.
if (redis.call("HGET", KEYS[3], "v") or "0") ~= seen then
  due_now(member)
  return 1
end
return 0
