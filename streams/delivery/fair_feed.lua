-- Move producers' queued work items into a priority's work stream, by deficit round robin.
--
-- While a priority's work stream holds fewer items than the buffer, ingest appends to it
-- directly; past that, each producer's items wait in a queue of their own (``ingest.lua``),
-- and this script lets them in as the stream drains: each round, every producer with items
-- queued earns its weight times the quantum, and moves that many (its deficit) into the
-- stream. So a producer with a million items queued and one with ten get their shares of the
-- stream's room, whatever came first. A producer whose queue empties forfeits what it had
-- left (it leaves the round), as deficit round robin has it.
--
-- Keys and arguments: ``streams.delivery.fairness.fair_feed_call`` lays them out.
-- KEYS: the work stream, the set of producers with items queued, the deficits (a hash),
--       then each producer's queue (a list)
-- ARGV: the buffer (items the stream may hold), the quantum, then per producer (in the
--       order of their queues): its name, its weight
--
-- Reply: the number of items moved (0 when the stream is full or the queues are empty).

local stream, producers, deficits = KEYS[1], KEYS[2], KEYS[3]
local buffer, quantum = tonumber(ARGV[1]), tonumber(ARGV[2])
local room = buffer - redis.call("XLEN", stream)
local moved = 0
local waiting = #KEYS - 3
local rounds = 0
while room > 0 and waiting > 0 and rounds < 1000 do
  rounds = rounds + 1
  waiting = 0
  for i = 1, #KEYS - 3 do
    local queue, name = KEYS[3 + i], ARGV[1 + 2 * i]
    if room <= 0 then
      break
    end
    if redis.call("EXISTS", queue) == 1 then
      local deficit = tonumber(redis.call("HGET", deficits, name) or "0")
      deficit = deficit + quantum * tonumber(ARGV[2 + 2 * i])
      local take = math.min(math.floor(deficit), room)
      if take > 0 then
        local items = redis.call("LPOP", queue, take)
        for _, item in ipairs(items) do
          redis.call("XADD", stream, "*", "w", item)
        end
        deficit, room, moved = deficit - #items, room - #items, moved + #items
      end
      if redis.call("EXISTS", queue) == 1 then
        waiting = waiting + 1
        redis.call("HSET", deficits, name, deficit)
      else
        redis.call("HDEL", deficits, name)
        redis.call("SREM", producers, name)
      end
    else
      redis.call("HDEL", deficits, name)
      redis.call("SREM", producers, name)
    end
  end
end
return moved
