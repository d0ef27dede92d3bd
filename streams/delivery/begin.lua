-- Take the lease of each delivery a worker is about to send, or say why not.
--
-- Keys and arguments: ``streams.delivery.store.delivery_begin_call`` lays them out.
-- KEYS: the work stream the items were read from, then per item: the delivery's state hash;
--       then the ``data:<id>`` hash of each item whose template data is shared
--       (``streams.delivery.work_items``) and the cancel marker of each campaign the items belong to
--       (once per campaign), in item order.
-- ARGV: consumer name, lease length (ms), leases allowed without an outcome, the number of
--       items, then per item: its work entry id, notification id, channel, the position in
--       KEYS of its data hash (0: none), the position in KEYS of its campaign's cancel marker
--       (0: none), and only for an item with a data hash when its delivery expires (ms).
--
-- Reply: one flat list, six values per item (a list per item would cost Lua a table, Redis
-- a nested array and the client a list each): verdict, version, attempts, now_ms,
-- first_attempt_ms, shared data ("" when the item has none or it is gone); for CANCELLED
-- instead the marker's value: who cancelled the campaign (its producer; "1" from a version
-- before it was recorded).
--   GO        the lease is ours until now + lease length; the state is SENDING
--   POISON    the lease is ours, but the delivery has been leased more often than allowed
--             without any outcome being recorded (workers keep dying on it): the caller
--             fails it into the dead-letter queue instead of sending it
--   CANCELLED the lease is ours, but the item's campaign was cancelled (its marker is
--             set), or its notification was cancelled while a worker held it (``cancel.lua``
--             marked its state ``cancelled_by``): the caller ends it CANCELLED instead of
--             sending it. It wins over POISON: such a delivery is not to be sent either way
--   TERMINAL  the delivery already ended (a TERMINAL status, ``streams.core.vocabulary``), or
--             the item is stale: its entry is older than the delivery's last move into
--             ``delayed`` (``requeued_ms``, written by ``finish.lua``), whose member is its
--             work now. A worker stopped with the entry read, whose delivery another worker
--             took over, tried and scheduled again, would otherwise send it once more now
--             and leave the member as a second entry. Drop the item
--   LEASED    a live lease is held: leave the item for later. Also when this consumer holds
--             it: the item is then a second work entry of a delivery leased in this batch,
--             being sent, or leased before this consumer restarted; a second GO would send
--             it twice. The reclaimer hands the item out again once the lease has run out.
-- A missing hash means "as accepted": version 1, no attempts yet; it is created here. Unless
-- the delivery shows otherwise that it ended and the projector released its state
-- (``release_states.lua``), for an item read or left pending before (a worker stopped
-- between reading and leasing, say, or a stale second entry that waited for a live lease):
-- TERMINAL, not sent again. It ended when the item's work entry is gone from the stream
-- (an entry is deleted in the step that records its outcome), or when the item shares its
-- notification's template data, the data hash is gone and the delivery has not expired (the
-- hash outlives the expiry; the last of the notification's deliveries to end deletes it).
-- Without the second test such an item would be sent again, with no data to fill its
-- template.
--
-- ``leases`` counts the leases taken since the last recorded outcome (the finish script
-- resets it). Only a lease this script really wrote counts: a call that Redis refuses (out
-- of memory, read-only, loading) writes nothing, so it can never make a delivery POISON,
-- however often the stream hands the entry out meanwhile.

local consumer, lease_ms, max_leases = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local stream = KEYS[1]
local items = tonumber(ARGV[4]) -- KEYS may hold data hashes and markers after the states
local next_arg = arguments(5)

local replies = {}
local function answer(verdict, version, attempts, first, data)
  local n = #replies
  replies[n + 1], replies[n + 2], replies[n + 3] = verdict, version, attempts
  replies[n + 4], replies[n + 5], replies[n + 6] = now, first, data
end

-- The value of the marker at a position in KEYS (false when it is not set), read once per
-- call: a batch often holds many deliveries of one campaign.
local markers = {}
local function cancelled(marker_at)
  if marker_at == 0 then
    return false
  end
  if markers[marker_at] == nil then
    markers[marker_at] = redis.call("GET", KEYS[marker_at])
  end
  return markers[marker_at]
end

for i = 1, items do
  local key = KEYS[i + 1]
  local entry_id, nid, channel = next_arg(), next_arg(), next_arg()
  local data_at, marker_at = tonumber(next_arg()), tonumber(next_arg())
  local expires_ms = data_at > 0 and tonumber(next_arg()) or 0
  local state = redis.call("HMGET", key, "status", "version", "attempts", "lease_owner",
    "lease_until", "first_attempt_ms", "leases", "cancelled_by", "requeued_ms")
  local status = state[1]
  local verdict, version, attempts, first = "GO", 1, 0, 0
  if not status and (#redis.call("XRANGE", stream, entry_id, entry_id) == 0
      or (data_at > 0 and (expires_ms == 0 or now < expires_ms)
        and redis.call("EXISTS", KEYS[data_at]) == 0)) then
    verdict = "TERMINAL"
  elseif not status then
    -- The first worker to touch a delivery creates its state, leased: one write.
    redis.call("HSET", key, "status", STATUS.SENDING, "version", 1, "attempts", 0,
      "notification_id", nid, "channel", channel, "lease_owner", consumer,
      "lease_until", now + lease_ms, "updated_ms", now, "leases", 1)
  else
    version, attempts = tonumber(state[2]), tonumber(state[3])
    first = tonumber(state[6] or 0) or 0
    if TERMINAL[status] then
      verdict = "TERMINAL"
    elseif tonumber(state[9] or 0) > tonumber(string.match(entry_id, "^%d+")) then
      -- Stale: the delivery went into ``delayed`` after this entry was made. Version 0
      -- makes the acknowledgement record nothing (``finish.lua`` answers MOVED).
      verdict, version = "TERMINAL", 0
    elseif tonumber(state[5] or 0) > now then
      verdict = "LEASED"
    else
      local leases = (tonumber(state[7] or 0) or 0) + 1
      redis.call("HSET", key, "status", STATUS.SENDING, "lease_owner", consumer,
        "lease_until", now + lease_ms, "updated_ms", now, "leases", leases)
      if leases > max_leases then
        verdict = "POISON"
      end
    end
  end
  local by = nil
  if verdict == "GO" or verdict == "POISON" then
    by = state[8] or cancelled(marker_at)
  end
  if by then
    verdict = "CANCELLED"
  end
  local data = ""
  if verdict == "CANCELLED" then
    data = by
  elseif data_at > 0 and (verdict == "GO" or verdict == "POISON") then
    data = redis.call("HGET", KEYS[data_at], "d") or ""
  end
  answer(verdict, version, attempts, first, data)
end
return replies
