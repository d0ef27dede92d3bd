-- Put one producer's due statuses, read from one shard's ``events`` entries, into the
-- producer's outbox, in order; each ``events`` entry only once.
--
-- The producer's ``positions`` hash holds, per shard, the last ``events`` entry whose statuses
-- were put in. An entry read again (the process died before acknowledging it) is older or
-- the same and is passed over, so a crash costs no second copy of a status here. Nothing is
-- put in once the producer's webhook is removed.
--
-- Keys and arguments: ``streams.status_webhooks.status_outbox_append_call`` lays them out.
-- KEYS: config, outbox, positions
-- ARGV: shard, then per status, in stream order: its events entry id, delivery id, version,
--       body
--
-- Reply: the statuses put in, or -1 when the producer has no webhook

local config, outbox, positions = KEYS[1], KEYS[2], KEYS[3]
local shard = ARGV[1]

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
local added, last = 0, nil
for i = 2, #ARGV, 4 do
  local source = ARGV[i]
  if newer(source, position) then
    redis.call("XADD", outbox, "*", "d", ARGV[i + 1], "v", ARGV[i + 2], "b", ARGV[i + 3])
    added = added + 1
    last = source
  end
end
if last then
  redis.call("HSET", positions, shard, last)
end
return added
