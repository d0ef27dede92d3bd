-- Record the outcome of deliveries: state, events and the work items' acknowledgement, in
-- one atomic step, so a crash never leaves one without the others.
--
-- Keys and arguments: ``streams.delivery.store.delivery_finish_call`` lays them out.
-- KEYS: work stream, events, delayed, dlq, then per item: the delivery's state hash; then
--       the ``data:<id>`` hash of each item that ends a delivery with shared template data
--       and the inbox keys (hash, order, feed) of each item that writes an inbox message,
--       as the items come.
-- ARGV: consumer group, retention (ms) of an ended delivery's state, of a FAILED one's,
--       every item's events joined into one JSON array (``codec.join_events``), each item's
--       first and last byte in that array as one string of numbers (``codec.span_text``;
--       "1 0" for an item without events), the number of items, then per item:
--   work entry id ("" for none), expected version, delayed member ("" for none), due ms,
--   the position in KEYS of the data hash it releases (0: none), state field count,
--   field/value pairs, dead-letter field count, field/value pairs (0 for none), the
--   position in KEYS of the inbox hash it writes a message to (0: none; its order and feed
--   follow it), and for one: the message id, the message, the delivery's version, how many
--   messages the inbox keeps, how long it lives (ms), the feed's length and how long (ms)
--   it lives after its newest change, the Pub/Sub channel and the recipient
--
-- The events of the recorded items go into one ``events`` entry (one atomic write, one
-- entry, as at ingest): the joined array as it came when every item is recorded, else each
-- recorded item's events cut out into an entry of their own (``append_events``,
-- ``wrong_type`` and ``arguments`` come from ``shared.lua``, ``TERMINAL`` from
-- ``streams.core.vocabulary``). All work
-- entries are acknowledged with one XACK and deleted with one XDEL: a work entry carries
-- the recipient's address, which has no business in Redis once its delivery moved on, and a
-- busy worker finishes dozens of deliveries per call, so each command saved is Redis time
-- saved.
--
-- Reply per item: "OK"; "ENDED" when the delivery had already ended (or its state is gone:
-- every outcome follows a lease, which ``delivery_begin.lua`` writes into the state, so a
-- state that is missing was an ended one, released since), or "MOVED" when another
-- worker recorded something for it since this one read its version: then only the work
-- entry is acknowledged, nothing is recorded twice; "BROKEN" when its state key holds
-- something other than a hash.
--
-- An item put into ``delayed`` stamps its state's ``requeued_ms`` (the Redis clock): its
-- work is that member now, and ``begin.lua`` drops a work entry made before as stale.
-- A state hash that reaches a terminal status expires after its retention; until then a
-- redelivered work item still finds it ended. A FAILED delivery's state lives as long as its
-- dead letter may be replayed (a replay re-checks it). A non-terminal state never expires.
-- A recorded item that releases a data hash counts one delivery of its notification done;
-- the last one deletes the hash. A recorded IN_APP item puts its message into the
-- recipient's inbox in the same step (``inbox_add``): SENT and the message come together.

local work, events, delayed, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, joined, spans = ARGV[1], ARGV[4], ARGV[5]
-- A terminal state expires after the ended one's retention, a FAILED one's after its own.
local ended_retention_ms, failed_retention_ms = ARGV[2], ARGV[3]

local next_arg = arguments(7)
local function take(count)
  local values = {}
  for j = 1, count do
    values[j] = next_arg()
  end
  return values
end

-- A message into a recipient's inbox, once (by its id): counted unread and unseen, the
-- oldest dropped beyond ``keep`` (the read model keeps the history), the keys' lifetime
-- renewed, the change fed and published.
local function inbox_add(at)
  local messages, order, feed = KEYS[at], KEYS[at + 1], KEYS[at + 2]
  local id, message, version = next_arg(), next_arg(), next_arg()
  local keep, ttl_ms = tonumber(next_arg()), next_arg()
  local feed_spec = { next_arg(), next_arg() }
  local live, recipient = next_arg(), next_arg()
  if redis.call("HSETNX", messages, "m:" .. id, message) == 0 then
    return
  end
  redis.call("HSET", messages, "f:" .. id, INBOX_NEW_STATE .. version)
  redis.call("HINCRBY", messages, "unread", 1)
  redis.call("HINCRBY", messages, "unseen", 1)
  redis.call("ZADD", order, 0, id)
  local excess = redis.call("ZCARD", order) - keep
  if excess > 0 then
    for _, old in ipairs(redis.call("ZRANGE", order, 0, excess - 1)) do
      local read, seen, archived = inbox_state(redis.call("HGET", messages, "f:" .. old))
      if archived == 0 and read == 0 then
        redis.call("HINCRBY", messages, "unread", -1)
      end
      if archived == 0 and seen == 0 then
        redis.call("HINCRBY", messages, "unseen", -1)
      end
      redis.call("HDEL", messages, "m:" .. old, "f:" .. old)
    end
    redis.call("ZREMRANGEBYRANK", order, 0, excess - 1)
  end
  for _, key in ipairs({ messages, order }) do
    redis.call("PEXPIRE", key, ttl_ms)
  end
  inbox_feed(messages, feed, feed_spec, live, recipient, "new", id, message)
end

local broken = wrong_type({ "stream", "stream", "zset", "stream" })
if broken then
  return broken
end

local replies, recorded, acked, all_recorded = {}, {}, {}, true
local requeued_at = nil -- the Redis clock (ms), read once for the items put into ``delayed``
for i = 5, 4 + tonumber(ARGV[6]) do
  local key = KEYS[i]
  local entry_id, expected = next_arg(), next_arg()
  local member, due_ms = next_arg(), next_arg()
  local release = tonumber(next_arg())
  local fields = take(tonumber(next_arg()))
  local dead_letter = take(tonumber(next_arg()))
  local inbox_at = tonumber(next_arg())

  -- A state key of the wrong type fails this item alone (BROKEN: nothing recorded, the
  -- work entry stays pending), not the items recorded before it in this call.
  local state = redis.pcall("HMGET", key, "status", "version")
  local reply = "OK"
  if state.err then
    reply = "BROKEN"
    entry_id = ""
  elseif not state[1] or TERMINAL[state[1]] then
    -- No state: the worker's lease created one, so it was an ended delivery's, released
    -- since (``release_states.lua``) or expired long after the end.
    reply = "ENDED"
  elseif state[2] ~= expected then
    reply = "MOVED"
  else
    if member ~= "" then
      -- Its work is the ``delayed`` member now: a work entry made before is stale
      -- (``begin.lua``). Stamped in the same write as the outcome's fields.
      requeued_at = requeued_at or now_ms()
      fields[#fields + 1], fields[#fields + 2] = "requeued_ms", requeued_at
    end
    redis.call("HSET", key, unpack(fields))
    for j = 1, #fields - 1, 2 do
      local status = fields[j + 1]
      if fields[j] == "status" and TERMINAL[status] then
        local retention = status == STATUS.FAILED and failed_retention_ms or ended_retention_ms
        redis.call("PEXPIRE", key, retention)
      end
    end
    recorded[#recorded + 1] = #replies + 1
    if member ~= "" then
      redis.call("ZADD", delayed, due_ms, member)
    end
    if #dead_letter > 0 then
      redis.call("XADD", dlq, "*", unpack(dead_letter))
    end
    if release > 0 and redis.call("HINCRBY", KEYS[release], "n", -1) <= 0 then
      redis.call("DEL", KEYS[release])
    end
  end
  if inbox_at > 0 then
    if reply == "OK" then
      inbox_add(inbox_at)
    else
      take(9) -- the message's arguments, unused
    end
  end
  if reply ~= "OK" then
    all_recorded = false
  end
  if entry_id ~= "" then
    acked[#acked + 1] = entry_id
  end
  replies[#replies + 1] = reply
end
append_events(events, joined, spans, all_recorded, recorded)
if #acked > 0 then
  redis.call("XACK", work, group, unpack(acked))
  redis.call("XDEL", work, unpack(acked))
end
return replies
