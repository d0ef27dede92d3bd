-- Take one verified provider callback into the feedback inbox, unless it was taken before.
--
-- Keys and arguments: ``streams.feedback.feedback_take_call`` lays them out.
-- KEYS: the inbox (a stream), the callback's replay guard
-- ARGV: how long the guard lives (ms), then each feedback item the callback holds (encoded)
--
-- Reply: 1 when taken (the guard set, the items appended), 0 when the guard was already
-- there (a replay: nothing appended). Guard and items go together, so a callback whose
-- items were lost can never be refused as a replay.

local inbox, guard, ttl = KEYS[1], KEYS[2], ARGV[1]
if not redis.call("SET", guard, "1", "NX", "PX", ttl) then
  return 0
end
for i = 2, #ARGV do
  redis.call("XADD", inbox, "*", "f", ARGV[i])
end
return 1
