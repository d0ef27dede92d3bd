-- A lease that one holder at a time has: taken when free, kept by renewing it before it
-- runs out, handed back on a clean stop.
--
-- Keys and arguments: ``streams.core.leases.lease_call`` lays them out.
-- KEYS: the lease
-- ARGV: "take" or "release", holder, time to live (ms)
--
-- Reply: 1 when the holder has the lease after the call ("take") or gave it back
-- ("release"), else 0

local lease = KEYS[1]
local action, holder, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local current = redis.call("GET", lease)
if action == "take" then
  if current and current ~= holder then
    return 0
  end
  redis.call("SET", lease, holder, "PX", ttl_ms)
  return 1
end
if current == holder then
  redis.call("DEL", lease)
  return 1
end
return 0
