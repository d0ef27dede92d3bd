-- Take verified provider callbacks into the feedback inbox, each unless it was taken before.
--
-- Keys and arguments: ``streams.feedback.store.feedback_take_call`` lays them out.
-- KEYS: the inbox (a stream), then each callback's replay guard
-- ARGV: per callback: how long its guard lives (ms), its number of items, each item (encoded)
--
-- Reply per callback: 1 when taken (its guard set, its items appended), 0 when its guard was
-- already there (a replay: nothing appended). Guard and items go together, so a callback
-- whose items were lost can never be refused as a replay.

local inbox = KEYS[1]
local next_arg = arguments(1)
local replies = {}
for k = 2, #KEYS do
  local ttl, count = next_arg(), tonumber(next_arg())
  local taken = redis.call("SET", KEYS[k], "1", "NX", "PX", ttl) and 1 or 0
  for _ = 1, count do
    local item = next_arg()
    if taken == 1 then
      redis.call("XADD", inbox, "*", "f", item)
    end
  end
  replies[#replies + 1] = taken
end
return replies
