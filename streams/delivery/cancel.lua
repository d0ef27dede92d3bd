-- Cancel deliveries that have not gone to a provider yet, atomically with any worker.
--
-- Keys and arguments: ``streams.delivery.cancellations.cancel_call`` lays them out.
-- KEYS: events, delayed, then per delivery: its state hash
-- ARGV: how long (ms) a CANCELLED state stays when nothing of the delivery is left to find
--       it, who cancels (the producer), the CANCELLED state's reason, how far ahead (ms) a
--       waiting work item may have been parked in PostgreSQL (``projections.parking``),
--       then per delivery:
--       its id, its notification's id, its channel, status at acceptance (the notification
--       record's),
--       the time it was due at acceptance (ms, 0: none), until when its state must stay
--       when a work item of it may still be somewhere (ms since the epoch: its
--       notification's expiry), its status in the read model ("" when not known there), and
--       its ``DeliveryCancelled`` event with ``"version":0,`` for the version this script
--       gives it
--
-- Per delivery, by its state hash (begin.lua and finish.lua write it; absent means "as
-- accepted", unless the read model has it ended: then its state was released since):
--   ended (TERMINAL, ``streams.core.vocabulary``)  left as it is; its status is the answer
--   SENDING with a live lease  a worker has it and may be calling the provider now: left to
--                              the worker (the lease wins), but marked ``cancelled_by``, so
--                              that a retry or deferral of it is not sent (begin.lua ends it
--                              CANCELLED at its next lease). Answer: SENDING
--   anything else              CANCELLED, version + 1, with its event (the cancel wins: a
--                              worker leasing it after this finds it ended). Its ``delayed``
--                              member (a delivery sent later, deferred or retried: found by
--                              its due time, the member naming its id first) is removed;
--                              when none was found, or it was due far enough ahead to have
--                              a parked copy, a work item of it may still come from a
--                              stream, a producer's queue or PostgreSQL, so the state stays
--                              until the notification expires and the projector does not
--                              release it early (``held``)
--
-- Reply: the status of each delivery after the call, in order.

local events, delayed = KEYS[1], KEYS[2]
local retention_ms, by, reason = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
local parked_beyond = now + tonumber(ARGV[4])
local next_arg = arguments(5)
local written, replies = {}, {}

-- The ``delayed`` members due at each time looked at, by the delivery id each names first
-- (a work item is a JSON array that starts with it): many deliveries of a batch share their
-- due time, so each time's members are read and parsed once per call.
local due_members = {}
local function members_due_at(due)
  local found = due_members[due]
  if not found then
    found = {}
    for _, member in ipairs(redis.call("ZRANGEBYSCORE", delayed, due, due)) do
      local id = string.match(member, '^%S+ %["([^"]+)"')
      if id then
        found[id] = member
      end
    end
    due_members[due] = found
  end
  return found
end

-- Remove the ``delayed`` member of delivery ``id`` due at ``due``; whether one was found.
local function unschedule(id, due)
  if not due or due <= 0 then
    return false
  end
  local members = members_due_at(due)
  local member = members[id]
  if not member then
    return false
  end
  redis.call("ZREM", delayed, member)
  members[id] = nil
  return true
end

for i = 3, #KEYS do
  local key = KEYS[i]
  local id, nid, channel = next_arg(), next_arg(), next_arg()
  local accepted_as, due_at_acceptance = next_arg(), tonumber(next_arg())
  local hold_until, projected, event = next_arg(), next_arg(), next_arg()
  local state = redis.call("HMGET", key, "status", "version", "lease_until", "due_ms")
  local status, version = state[1], tonumber(state[2] or "1")
  local answer = nil
  if not status then
    if projected ~= "" and TERMINAL[projected] then
      answer = projected -- ended, and its state released since
    elseif TERMINAL[accepted_as] then
      answer = accepted_as -- suppressed or expired at ingest
    end
  elseif TERMINAL[status] then
    answer = status
  elseif status == STATUS.SENDING and tonumber(state[3] or 0) > now then
    redis.call("HSET", key, "cancelled_by", by)
    answer = STATUS.SENDING
  end
  if not answer then
    version = version + 1
    local due = due_at_acceptance
    if status then
      due = tonumber(state[4] or 0)
    end
    local removed = unschedule(id, due)
    redis.call("HSET", key, "status", STATUS.CANCELLED, "version", version, "reason", reason,
      "notification_id", nid, "channel", channel, "lease_owner", "", "lease_until", 0,
      "updated_ms", now, "leases", 0)
    if not status then
      redis.call("HSET", key, "attempts", 0) -- as a lease creates a state (begin.lua)
    end
    if removed and due <= parked_beyond then
      redis.call("PEXPIRE", key, retention_ms)
    else
      redis.call("HSET", key, "held", 1)
      redis.call("PEXPIREAT", key, hold_until)
    end
    written[#written + 1] = string.gsub(event, '"version":0,', '"version":' .. version .. ",", 1)
    answer = STATUS.CANCELLED
  end
  replies[#replies + 1] = answer
end
if #written > 0 then
  redis.call("XADD", events, "*", "e", "[" .. table.concat(written, ",") .. "]")
end
return replies
