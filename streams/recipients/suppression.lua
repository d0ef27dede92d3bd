-- Put an address on one shard's copy of the suppression list, or take it off.
--
-- Every shard holds a copy (so ingest checks it inside its own single-slot script); the
-- address's home shard also records the event. Each change that does something bumps the
-- copy's version (field "#v"), by which ingest learns that the list moved since it planned.
--
-- Keys and arguments: ``streams.recipients.suppressions.suppression_call`` lays them out.
-- KEYS: suppression list, events
-- ARGV: "add" or "remove", the field ("<channel>:<address digest>"), its value (add), the
--       encoded event ("" on a copy that is not the home shard)
--
-- Reply: 1 when the list changed, 0 when it already was so (a remove of an absent field).

local suppressed, events = KEYS[1], KEYS[2]
local change, field, value, event = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local changed = 0
if change == "add" then
  redis.call("HSET", suppressed, field, value)
  changed = 1
elseif change == "remove" then
  changed = redis.call("HDEL", suppressed, field)
else
  return redis.error_reply("unknown change " .. change)
end
if changed == 1 then
  redis.call("HINCRBY", suppressed, "#v", 1)
  if event ~= "" then
    redis.call("XADD", events, "*", "e", event)
  end
end
return changed
