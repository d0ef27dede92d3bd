-- Claim a shard's due digests for one closer: each taken is pushed ``claim`` ms into the
-- future on the due set, so another closer does not take it meanwhile, and it comes due again
-- by itself if this closer dies before closing it.
--
-- Keys and arguments: ``streams.digests.closing.digest_take_call`` lays them out.
-- KEYS: the shard's digests by closing time (members "<digest id> <its open key>")
-- ARGV: now (ms), at most how many to take, how long (ms) a claim lasts
--
-- Reply: the members taken, the most overdue first.

local due = KEYS[1]
local now, limit, claim = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local taken = redis.call("ZRANGEBYSCORE", due, "-inf", now, "LIMIT", 0, limit)
for _, member in ipairs(taken) do
  redis.call("ZADD", due, now + claim, member)
end
return taken
