-- Put one producer's due statuses, read from one shard's ``events`` entries, into the
-- producer's outbox, in order; each ``events`` entry only once.
--
-- The producer's ``positions`` hash holds, per shard, the last ``events`` entry whose statuses
-- were put in. An entry read again (the process died before acknowledging it) is older or
-- the same and is passed over, so a crash costs no second copy of a status here. Entries
-- taken over out of order (a consumer that died long ago, found after newer entries were
-- read) come with "again": put in whatever the position says, as a repeat is better than a
-- loss. Nothing is put in once the producer's webhook is removed.
--
-- Keys and arguments: ``streams.status_webhooks.outbox.status_outbox_append_call`` lays them out.
-- KEYS: config, outbox, positions
-- ARGV: shard, "once" or "again", then per status, in stream order: its events entry id,
--       delivery id, version, body
--
-- Reply: the statuses put in, or -1 when the producer has no webhook

local config, outbox, positions = KEYS[1], KEYS[2], KEYS[3]
local shard, again = ARGV[1], ARGV[2] == "again"

local function parse(id)
  local dash = string.find(id, "-", 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end

local function newer(a, b)
  local a_ms, a_seq = parse(a)
  local b_ms, b_seq = parse(b)
  return a_ms > b_ms or (a_ms == b_ms and a_seq > b_seq)
end

if redis.call("EXISTS", config) == 0 then
  return -1
end
local position = redis.call("HGET", positions, shard) or "0-0"
local added, last = 0, position
for i = 3, #ARGV, 4 do
  local source = ARGV[i]
  if again or newer(source, position) then
    redis.call("XADD", outbox, "*", "d", ARGV[i + 1], "v", ARGV[i + 2], "b", ARGV[i + 3])
    added = added + 1
    if newer(source, last) then
      last = source
    end
  end
end
if last ~= position then
  redis.call("HSET", positions, shard, last)
end
return added
