-- Give up on one status: move it from the producer's outbox to the producer's dead-letter
-- stream, with why. The dead-letter stream keeps entries for the retention only: older ones
-- are trimmed as new ones come, and the stream expires when none came for that long.
--
-- Keys and arguments: ``streams.status_webhooks.outbox.status_dead_letter_call`` lays them out.
-- KEYS: outbox, dlq
-- ARGV: outbox entry id, retention (ms), dead-letter field/value pairs...
--
-- Reply: 1, or 0 when the entry was gone (the webhook was removed): nothing is written then

local outbox, dlq = KEYS[1], KEYS[2]
local entry_id, retention_ms = ARGV[1], tonumber(ARGV[2])
if redis.call("XDEL", outbox, entry_id) == 0 then
  return 0
end
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
local oldest = string.format("%d-0", math.max(0, now_ms() - retention_ms))
redis.call("XADD", dlq, "MINID", oldest, "*", unpack(fields))
redis.call("PEXPIRE", dlq, retention_ms)
return 1
