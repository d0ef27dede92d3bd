-- End waiting deliveries of an erased recipient and remove their work items, which hold the
-- recipient's address, from one shard, in one atomic step.
--
-- Keys and arguments: ``streams.recipients.erase.erase_call`` lays them out.
-- KEYS: events, then per item: the delivery's state hash, where its work item is (a work
--       stream, ``delayed`` or a producer's queue), and its ``data:<id>`` hash when its
--       template data is shared.
-- ARGV: consumer group, retention (ms) of an ended delivery's state, now (ms), then per item:
--       its number of keys (2 or 3), "stream", "zset" or "list", the work entry id, the
--       ``delayed`` member or the queued item, the delivery version the caller read, the
--       encoded DeliverySuppressed event
--       ("erased", that version + 1), the notification id, the channel.
--
-- Reply per item:
--   "ERASED"     the delivery ends SUPPRESSED ("erased"), its event is appended, its work
--                item removed (and its share of the notification's template data released)
--   "ENDED"      the delivery had ended already: only its work item is removed
--   "IN_FLIGHT"  a worker holds its lease: left alone (its attempt ends as attempts end; the
--                caller looks again once the lease is over)
--   "MOVED"      its version changed since the caller read it: left alone, read it again
-- A missing state hash means "as accepted" (version 1), as everywhere.

local events, group = KEYS[1], ARGV[1]
local retention_ms, now = ARGV[2], tonumber(ARGV[3])
local next_arg = arguments(4)

local function remove(source, kind, entry)
  if kind == "stream" then
    redis.call("XACK", source, group, entry)
    redis.call("XDEL", source, entry)
  elseif kind == "list" then
    redis.call("LREM", source, 1, entry)
  else
    redis.call("ZREM", source, entry)
  end
end

local replies, k = {}, 2
while k <= #KEYS do
  local count = tonumber(next_arg())
  local key, source = KEYS[k], KEYS[k + 1]
  local data = count == 3 and KEYS[k + 2] or nil
  k = k + count
  local kind, entry, expected, event = next_arg(), next_arg(), next_arg(), next_arg()
  local notification_id, channel = next_arg(), next_arg()
  local state = redis.call("HMGET", key, "status", "version", "lease_until")
  local reply = "ERASED"
  if state[1] and TERMINAL[state[1]] then
    reply = "ENDED"
    remove(source, kind, entry)
  elseif state[1] == STATUS.SENDING and tonumber(state[3] or 0) > now then
    reply = "IN_FLIGHT"
  elseif (state[2] or "1") ~= expected then
    reply = "MOVED"
  else
    redis.call("HSET", key, "status", STATUS.SUPPRESSED, "reason", "erased",
      "version", tonumber(expected) + 1, "notification_id", notification_id, "channel", channel,
      "lease_owner", "", "lease_until", 0, "updated_ms", now)
    redis.call("PEXPIRE", key, retention_ms)
    redis.call("XADD", events, "*", "e", event)
    remove(source, kind, entry)
    if data and redis.call("HINCRBY", data, "n", -1) <= 0 then
      redis.call("DEL", data)
    end
  end
  replies[#replies + 1] = reply
end
return replies
