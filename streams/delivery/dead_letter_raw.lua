-- Move a work entry that cannot be handled (it cannot be read) to the dead-letter queue with
-- its raw fields, and acknowledge and delete it so it never blocks its group.
--
-- Keys and arguments: ``streams.delivery.store.dead_letter_raw_call`` lays them out.
-- KEYS: work stream, dlq
-- ARGV: consumer group, work entry id, dead-letter field/value pairs...
local work, dlq = KEYS[1], KEYS[2]
local group, entry_id = ARGV[1], ARGV[2]
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call("XADD", dlq, "*", unpack(fields))
local acked = redis.call("XACK", work, group, entry_id)
redis.call("XDEL", work, entry_id)
return acked
