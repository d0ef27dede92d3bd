-- Move work items whose time has come (by the Redis clock) from ``delayed`` to their work
-- streams.
--
-- Keys and arguments: ``streams.delivery.delayed.schedule_due_call`` lays them out.
-- KEYS: delayed, work:high, work:normal, work:low, dlq
-- ARGV: most items to move
-- A member is "<high|normal|low> <encoded work item>".
-- Reply: {moved count, ms until the next waiting member is due (0: due now), or -1 if none}
local delayed, dlq = KEYS[1], KEYS[5]
local streams = work_streams(2)
local now = now_ms()
local due = redis.call("ZRANGEBYSCORE", delayed, "-inf", now, "LIMIT", 0, tonumber(ARGV[1]))
for _, member in ipairs(due) do
  local space = string.find(member, " ", 1, true)
  local stream = space and streams[string.sub(member, 1, space - 1)]
  if stream then
    redis.call("XADD", stream, "*", "w", string.sub(member, space + 1))
  else -- not ours to understand: park it where an operator looks
    redis.call("XADD", dlq, "*", "reason", "unreadable delayed member", "member", member)
  end
  redis.call("ZREM", delayed, member)
end
local next_due = redis.call("ZRANGE", delayed, 0, 0, "WITHSCORES")
if not next_due[2] then
  return { #due, -1 }
end
return { #due, math.max(0, math.ceil(tonumber(next_due[2]) - now)) }
