-- Apply provider feedback to deliveries of one shard: state, event and the feedback's mark,
-- in one atomic step.
--
-- Keys and arguments: ``streams.feedback.store.feedback_apply_call`` lays them out.
-- KEYS: events, then per item: the delivery's state hash
-- ARGV: retention (ms) of an ended delivery's state, then per item: the feedback id, the
--       version the caller read, field count, field/value pairs of the state (status,
--       version, ...), the encoded ProviderFeedbackReceived event
--
-- Reply per item:
--   "OK"     applied: the state changed, the event appended, the feedback id marked
--   "DUP"    this feedback was applied before (its mark ``fb:<id>`` is on the state)
--   "MOVED"  the delivery changed since the caller read it: read it again
-- A missing state hash (it expired, long after the delivery ended) is taken as the caller
-- read it from the read model: version and status as given; it is written anew and expires
-- as an ended delivery's does.

local events, retention_ms = KEYS[1], ARGV[1]
local next_arg = arguments(2)

local replies = {}
for i = 2, #KEYS do
  local key = KEYS[i]
  local feedback_id, expected = next_arg(), next_arg()
  local fields = {}
  for j = 1, tonumber(next_arg()) do
    fields[j] = next_arg()
  end
  local event = next_arg()
  local version = redis.call("HGET", key, "version")
  local reply = "OK"
  if redis.call("HEXISTS", key, "fb:" .. feedback_id) == 1 then
    reply = "DUP"
  elseif version and version ~= expected then
    reply = "MOVED"
  else
    redis.call("HSET", key, "fb:" .. feedback_id, "1", unpack(fields))
    redis.call("PEXPIRE", key, retention_ms)
    redis.call("XADD", events, "*", "e", event)
  end
  replies[#replies + 1] = reply
end
return replies
