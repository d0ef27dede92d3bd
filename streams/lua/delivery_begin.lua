-- Take the lease of each delivery a worker is about to send, or say why not.
--
-- Keys and arguments: ``streams.delivery_store.delivery_begin_call`` lays them out.
-- KEYS: per item: the delivery's state hash.
-- ARGV: consumer name, lease length (ms), then per item: notification id, channel.
--
-- Reply: one flat list, five values per item (a list per item would cost Lua a table, Redis
-- a nested array and the client a list each): verdict, version, attempts, now_ms,
-- first_attempt_ms.
--   GO       the lease is ours until now + lease length; the state is SENDING
--   TERMINAL the delivery already ended (a TERMINAL status, ``shared.lua``): drop the item
--   LEASED   a live lease is held: leave the item for later. Also when this consumer holds
--            it: the item is then a second work entry of a delivery leased in this batch,
--            being sent, or leased before this consumer restarted; a second GO would send
--            it twice. The reclaimer hands the item out again once the lease has run out.
-- A missing hash means "as accepted": version 1, no attempts yet; it is created here.

local consumer, lease_ms = ARGV[1], tonumber(ARGV[2])
local now = now_ms()

local replies = {}
local function answer(verdict, version, attempts, first)
  local n = #replies
  replies[n + 1], replies[n + 2], replies[n + 3] = verdict, version, attempts
  replies[n + 4], replies[n + 5] = now, first
end

for i = 1, #KEYS do
  local key = KEYS[i]
  local nid, channel = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local state = redis.call("HMGET", key, "status", "version", "attempts", "lease_owner",
    "lease_until", "first_attempt_ms")
  local status = state[1]
  if not status then
    -- The first worker to touch a delivery creates its state, leased: one write.
    redis.call("HSET", key, "status", STATUS.SENDING, "version", 1, "attempts", 0,
      "notification_id", nid, "channel", channel, "lease_owner", consumer,
      "lease_until", now + lease_ms, "updated_ms", now)
    answer("GO", 1, 0, 0)
  else
    local version, attempts = tonumber(state[2]), tonumber(state[3])
    local first = tonumber(state[6] or 0) or 0
    if TERMINAL[status] then
      answer("TERMINAL", version, attempts, first)
    elseif tonumber(state[5] or 0) > now then
      answer("LEASED", version, attempts, first)
    else
      redis.call("HSET", key, "status", STATUS.SENDING, "lease_owner", consumer,
        "lease_until", now + lease_ms, "updated_ms", now)
      answer("GO", version, attempts, first)
    end
  end
end
return replies
