-- Accept a batch of notifications on one shard, each independently, all in one atomic step.
--
-- KEYS: events, work:high, work:normal, work:low, delayed,
--       then per item: idempotency record, notification record, recipient settings.
-- ARGV: idempotency ttl (ms), in-flight marker ttl (ms), prefix of notification record keys,
--       every item's events joined into one JSON array (``codec.join_events``),
--       then per item: fingerprint, request token, expected settings version, notification
--       id, notification record, first and last byte of its events in the joined array,
--       work item count, then per work item: target (high|normal|low|delayed), due time in
--       ms (delayed only), encoded item.
--
-- The events of the accepted items go into one ``events`` entry: one atomic write, one
-- entry. When every item is accepted, that is the joined array as it came; otherwise each
-- accepted item's events are cut out of it into an entry of their own (building one large
-- string in Lua costs more than the XADDs it would save).
--
-- Only the notification record, the events and the work items are written: a delivery's
-- state hash is created by the first worker that touches it (absent means "as accepted"),
-- which keeps this script to a handful of commands per notification. The record lives as
-- long as the idempotency record that points to it.
--
-- This script runs for every accepted notification, so its common path is kept short: one
-- SET ... NX GET claims a fresh key and reads an existing one in a single command, and the
-- arguments are read by position, without a table per item.
--
-- Reply, one entry per item:
--   {"OK"}               accepted: everything written
--   {"DUP", record}      same key, same body: the first notification's record, nothing
--                        written
--   {"CONFLICT"}         same key, different body
--   {"BUSY"}             same key, the first request is still in flight
--   {"STALE", settings}  the recipient's settings changed since the caller read them; the
--                        caller plans again and calls again with the same token
--   {"BROKEN", error}    the item's idempotency or settings key holds the wrong type;
--                        nothing written
--
-- Idempotency record value: "done <fingerprint> <notification id>" or
-- "pending <token> <fingerprint>".

local events, delayed = KEYS[1], KEYS[5]
local work = { high = KEYS[2], normal = KEYS[3], low = KEYS[4] }
local idem_ttl, pending_ttl, record_prefix, joined = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local function split_first(text)
  local space = string.find(text, " ", 1, true)
  if not space then
    return text, ""
  end
  return string.sub(text, 1, space - 1), string.sub(text, space + 1)
end

-- The reply for a key that already had a record, or nil when that record is this request's
-- own in-flight marker (a STALE round coming back), so the request may go on.
local function verdict(record, fingerprint, token)
  local kind, rest = split_first(record)
  if kind == "done" then
    local earlier_fingerprint, notification_id = split_first(rest)
    if earlier_fingerprint ~= fingerprint then
      return { "CONFLICT" }
    end
    -- Same shard, so the same hash tag as the keys this call declares.
    return { "DUP", redis.call("GET", record_prefix .. notification_id) or "" }
  end
  local owner, earlier_fingerprint = split_first(rest)
  if earlier_fingerprint ~= fingerprint then
    return { "CONFLICT" }
  end
  if owner ~= token then
    return { "BUSY" }
  end
  return nil
end

-- The shared keys are checked first: a failure halfway would leave the items before it
-- written without their events.
for k = 1, 5 do
  local kind = redis.call("TYPE", KEYS[k])["ok"]
  local wanted = k == 5 and "zset" or "stream"
  if kind ~= "none" and kind ~= wanted then
    return redis.error_reply("WRONGTYPE " .. KEYS[k] .. " holds a " .. kind .. ", not a " .. wanted)
  end
end

local replies, accepted, all_accepted = {}, {}, true
local argi, keyi, last = 5, 6, #ARGV
while argi <= last do
  local fingerprint, token, settings_version = ARGV[argi], ARGV[argi + 1], ARGV[argi + 2]
  local id, record = ARGV[argi + 3], ARGV[argi + 4]
  local events_first, events_last = ARGV[argi + 5], ARGV[argi + 6]
  local first_work = argi + 8
  argi = first_work + 3 * tonumber(ARGV[argi + 7])
  local idem, ntf, rcpt = KEYS[keyi], KEYS[keyi + 1], KEYS[keyi + 2]
  keyi = keyi + 3

  -- Read the recipient's settings version, then claim the key as done or read what an
  -- earlier request left there. A key of the wrong type fails this item alone, before
  -- anything of it is written.
  local done = "done " .. fingerprint .. " " .. id
  local version = redis.pcall("HGET", rcpt, "v")
  local earlier = nil
  if not (type(version) == "table" and version.err) then
    earlier = redis.pcall("SET", idem, done, "PX", idem_ttl, "NX", "GET")
  end
  local reply = nil
  if type(version) == "table" and version.err then
    reply = { "BROKEN", version.err }
  elseif type(earlier) == "table" and earlier.err then
    reply = { "BROKEN", earlier.err }
  elseif earlier then
    reply = verdict(earlier, fingerprint, token)
  end
  if reply == nil then
    if (version or "0") ~= settings_version then
      redis.call("SET", idem, "pending " .. token .. " " .. fingerprint, "PX", pending_ttl)
      reply = { "STALE", redis.call("HGETALL", rcpt) }
    else
      if earlier then -- this request's own in-flight marker: now it is done
        redis.call("SET", idem, done, "PX", idem_ttl)
      end
      redis.call("SET", ntf, record, "PX", idem_ttl)
      accepted[#accepted + 1] = events_first
      accepted[#accepted + 1] = events_last
      for w = first_work, argi - 1, 3 do
        local target = ARGV[w]
        if target == "delayed" then
          redis.call("ZADD", delayed, ARGV[w + 1], ARGV[w + 2])
        else
          redis.call("XADD", work[target], "*", "w", ARGV[w + 2])
        end
      end
      reply = { "OK" }
    end
  end
  if reply[1] ~= "OK" then
    all_accepted = false
  end
  replies[#replies + 1] = reply
end
if all_accepted then
  redis.call("XADD", events, "*", "e", joined)
else
  for j = 1, #accepted, 2 do
    local part = string.sub(joined, tonumber(accepted[j]), tonumber(accepted[j + 1]))
    redis.call("XADD", events, "*", "e", "[" .. part .. "]")
  end
end
return replies
