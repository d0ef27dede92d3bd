-- Put parked work items back into ``delayed``, ahead of their due time, unless their
-- delivery moved on meanwhile.
--
-- Keys and arguments: ``streams.delivery.parking.promote_call`` lays them out.
-- KEYS: delayed, then per item: its delivery's state hash
-- ARGV: per item: its due time (ms), the ``delayed`` member
--
-- An item goes back (ZADD NX: a repeat of the same promotion adds nothing) while its
-- delivery has no state (untouched since ingest) or is SCHEDULED (a retry or deferral that
-- waits); one whose delivery ended (cancelled, say) or is with a worker is dropped.
--
-- Reply: how many items went back.

local delayed = KEYS[1]
local promoted = 0
for i = 2, #KEYS do
  local due, member = ARGV[2 * i - 3], ARGV[2 * i - 2]
  local status = redis.call("HGET", KEYS[i], "status")
  if not status or status == STATUS.SCHEDULED then
    promoted = promoted + redis.call("ZADD", delayed, "NX", due, member)
  end
end
return promoted
