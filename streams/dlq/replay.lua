-- Replay dead-lettered deliveries of one shard, or (dry run) only say what a replay would do.
--
-- Keys and arguments: ``streams.dlq.replay.dlq_replay_call`` lays them out.
-- KEYS: events, work:high, work:normal, work:low, dlq:resolved, delayed, suppression list,
--       then per entry: the delivery's state hash, the recipient's settings.
-- ARGV: dry run ("1" or "0"), operator, reason, most entries to replay,
--       then per entry: dlq entry id, kind (FAILED or POISON), expected delivery version,
--       whether this call already replayed the delivery through an earlier entry ("1"/"0"),
--       the notification's expiry (ms), where the work goes (high, normal or low for a work
--       stream; the end of the recipient's quiet hours in ms for ``delayed``), its events
--       (one ``events`` entry: DeliveryReplayed, then DeliveryDeferred when it waits), the
--       fresh work item (a ``delayed`` member when it waits), the recipient's settings field
--       that switches this type off on this channel ("" when the type cannot be opted out
--       of), the suppression list's field of the address ("" for none), whether the type may
--       be opted out of ("1"/"0": a complaint or an unsubscribe stops only such types).
--
-- Reply per entry: "replayed", a reason it was skipped, or "over_limit" once as many entries
-- as allowed were replayed (nothing is done for those).
--
-- A replay checks what ingest checks and may have changed since the delivery failed: the
-- recipient switched the type off (opted_out), or the address went on the suppression list
-- (suppressed_<reason>). Neither is final: an opt-in or a removal lets a later call replay.
--
-- A replay keeps the delivery id, bumps the version, starts a fresh attempt series, appends
-- the events and a work item, and marks the entry resolved; the entry itself stays. One held
-- back by quiet hours is SCHEDULED at the window's end, a second change (version + 2). A skip
-- whose reason can never change (FINAL) marks the entry too, so it leaves the open dead
-- letters. A dry run evaluates exactly the same checks and writes nothing. The time is the
-- Redis clock's (``now_ms``, with ``work_streams``, ``enqueue`` from ``shared.lua``, the status
-- sets from ``streams.core.vocabulary``).

local events, resolved, delayed, suppressed = KEYS[1], KEYS[5], KEYS[6], KEYS[7]
local work = work_streams(2)
local dry_run, operator, reason, budget = ARGV[1] == "1", ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local FINAL = {
  replayed = true, superseded = true, state_expired = true, already_sent = true,
  already_ended = true, ttl_passed = true, quiet_hours_past_ttl = true,
}

local replayed_here = {}
local replayed = 0

-- The reason of an active suppression list entry that stops this delivery, or nil.
local function suppression(field, opt_out_type)
  if field == "" then
    return nil
  end
  local value = redis.call("HGET", suppressed, field)
  if not value then
    return nil
  end
  local until_ms, reason = string.match(value, "^(%d+)|([%w_]+)|")
  until_ms = tonumber(until_ms)
  if until_ms ~= 0 and until_ms <= now then
    return nil
  end
  if (reason == "complaint" or reason == "unsubscribed") and opt_out_type ~= "1" then
    return nil
  end
  return reason
end

local function verdict(key, entry_id, kind, expected, earlier, expires_ms, due_ms, checks)
  if redis.call("HEXISTS", resolved, entry_id) == 1 then
    return "already_replayed" -- by a concurrent call since this one selected it
  end
  if earlier == "1" or replayed_here[key] then
    return "superseded"
  end
  local state = redis.call("HMGET", key, "status", "version")
  local status, version = state[1], state[2]
  if not status then
    return "state_expired"
  elseif PROVIDER_ACCEPTED[status] then
    return "already_sent"
  elseif ENDED_UNSENT[status] then
    return "already_ended"
  elseif version ~= expected then
    -- A FAILED entry's delivery moved on (replayed and failed again: a newer entry exists);
    -- a POISON entry's delivery changed since the caller read its version: try again.
    return kind == "FAILED" and "superseded" or "moved"
  elseif kind == "FAILED" and status ~= STATUS.FAILED then
    return "superseded"
  elseif checks.preference ~= "" and redis.call("HEXISTS", checks.rcpt, checks.preference) == 1 then
    return "opted_out"
  end
  local stopped = suppression(checks.field, checks.opt_out)
  if stopped then
    return "suppressed_" .. stopped
  elseif tonumber(expires_ms) <= now then
    return "ttl_passed" -- never send a stale notification
  elseif due_ms and due_ms >= tonumber(expires_ms) then
    return "quiet_hours_past_ttl" -- it would be stale by the time it may go
  end
  return "replayed"
end

local next_arg = arguments(5)
local replies = {}
for i = 8, #KEYS, 2 do
  local key = KEYS[i]
  local entry_id, kind, expected, earlier = next_arg(), next_arg(), next_arg(), next_arg()
  local expires_ms, destination, event_entry, item = next_arg(), next_arg(), next_arg(), next_arg()
  local checks = { rcpt = KEYS[i + 1], preference = next_arg(), field = next_arg(),
    opt_out = next_arg() }
  local due_ms = tonumber(destination) -- nil for a work stream
  local outcome = "over_limit"
  if replayed < budget then
    outcome = verdict(key, entry_id, kind, expected, earlier, expires_ms, due_ms, checks)
  end
  if outcome == "replayed" then
    replayed = replayed + 1
    replayed_here[key] = true
    if not dry_run then
      -- Queued again (version + 1); one held back by quiet hours is then SCHEDULED until
      -- the window ends, a second change (version + 2).
      local status, version = STATUS.QUEUED, tonumber(expected) + 1
      if due_ms then
        status, version = STATUS.SCHEDULED, version + 1
      end
      redis.call("HSET", key, "status", status, "version", version, "attempts", 0,
        "lease_owner", "", "lease_until", 0, "updated_ms", now)
      redis.call("HDEL", key, "first_attempt_ms", "last_attempt_ms")
      -- A terminal state may carry a retention expiry; a queued delivery must not vanish.
      redis.call("PERSIST", key)
      redis.call("XADD", events, "*", "e", event_entry)
      if due_ms then
        redis.call("HSET", key, "due_ms", due_ms)
      else
        redis.call("HDEL", key, "due_ms")
      end
      enqueue(work, delayed, destination, item)
    end
  end
  if FINAL[outcome] and not dry_run then
    redis.call("HSET", resolved, entry_id, cjson.encode({
      outcome = outcome, operator = operator, reason = reason, at_ms = now,
    }))
  end
  replies[#replies + 1] = outcome
end
return replies
