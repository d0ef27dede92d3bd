-- Ingest a batch of notifications on one shard, each independently, all in one atomic step.
--
-- Keys and arguments: ``streams.ingest.writer.ingest_call`` lays them out.
-- KEYS: events, work:high, work:normal, work:low, delayed, suppression list, the producers
--       with NORMAL items queued, those with LOW items queued (``streams.delivery.fairness``), then
--       per item: idempotency record, notification record, recipient settings, its
--       producer's queue of its priority, its data hash when its work items share their
--       template data, and its cancellation index when it has a cancellation key.
-- ARGV: idempotency ttl (ms), in-flight marker ttl (ms), every item's events joined into one
--       JSON array (``codec.join_events``), each item's first and last byte in that array as
--       one string of numbers ("1 420 422 845 ..."), the fairness buffer (items a NORMAL or
--       LOW work stream may hold before producers' items queue), then per item: its
--       idempotency record
--       when done ("done <fingerprint> <notification id>"), expected settings version,
--       the suppression list's version it was planned with, the list fields of its
--       addresses ("<channel>:<digest>", space-separated; "" when it assumed an empty list),
--       the fields it found suppressed (the same way), notification record, shared template
--       data ("" for none) followed, only when there
--       is some, by the time it expires (ms since the epoch), work item count (with a
--       cancellation key: "<count> <until when its index keeps it, ms since the epoch>"; one
--       argument less for every notification without one), then per work
--       item: where it goes (high, normal or low for a work stream; the due time in ms for
--       ``delayed``) and the encoded item.
--
-- The events of the accepted items go into one ``events`` entry: one atomic write, one
-- entry. When every item is accepted, that is the joined array as it came; otherwise each
-- accepted item's events are cut out of it into an entry of their own (``append_events``,
-- ``wrong_type``, ``work_streams`` and ``enqueue`` come from ``shared.lua``).
--
-- Only the notification record, the events and the work items are written: a delivery's
-- state hash is created by the first worker that touches it (absent means "as accepted"),
-- which keeps this script to a handful of commands per notification. The record lives as
-- long as the idempotency record that points to it. Shared template data goes into the
-- notification's data hash with the number of its work items (``n``): each delivery that
-- ends counts itself off (``delivery_finish.lua``), and the hash expires with the
-- notification in any case.
--
-- This script runs for every accepted notification, so its common path is kept short: one
-- SET ... NX GET claims a fresh key and reads an existing one in a single command, and the
-- arguments are read by position, without a table per item. Every argument costs Redis an
-- object and Lua an interned string (hashed in full), so an item carries only what the
-- script needs: its idempotency record comes ready to store, and the fingerprint and the
-- notification id (which doubles as the request's token across a STALE round) are read out
-- of it only on the rare paths.
--
-- Reply, one entry per item: a word, or a list when the item's answer carries data (a plain
-- word spares Lua, Redis and the client a list per accepted item):
--   "OK"                 accepted: everything written
--   {"DUP", id}          same key, same body: the id of the notification accepted first
--                        (the caller reads its record), nothing written
--   "CONFLICT"           same key, different body
--   "BUSY"               same key, the first request is still in flight
--   {"STALE", settings}  the recipient's settings changed since the caller read them; the
--                        caller plans again and calls again with the same ids
--   {"SUPPRESSIONS", version, field, value, ...}
--                        the suppression list is not what the item was planned with: its
--                        version now, and the active entries among the item's fields; the
--                        caller plans again with them (as for STALE)
--   {"BROKEN", error}    the item's idempotency or settings key holds the wrong type;
--                        nothing written
--
-- Idempotency record value: "done <fingerprint> <notification id>" or
-- "pending <notification id> <fingerprint>": the id of the request that holds the key.

local events, delayed, suppressed = KEYS[1], KEYS[5], KEYS[6]
local work = work_streams(2)
local idem_ttl, pending_ttl = ARGV[1], ARGV[2]
local joined, spans, buffer = ARGV[3], ARGV[4], tonumber(ARGV[5])
local queued_producers = { normal = KEYS[7], low = KEYS[8] }

-- Lengths of the work streams and of the producers' queues as this call left them: each is
-- read once per call.
local stream_lengths, queue_lengths = {}, {}

-- Put a work item where ``destination`` says (``enqueue``), except that a NORMAL or LOW item
-- waits in its producer's queue while that queue is not empty or the stream is full; a
-- feeder lets it in at the producer's fair share (``streams/delivery/fair_feed.lua``).
local function admit(destination, item, queue)
  local producers = queued_producers[destination]
  if not producers then
    enqueue(work, delayed, destination, item)
    return
  end
  local waiting = queue_lengths[queue] or redis.call("LLEN", queue)
  local length = stream_lengths[destination] or redis.call("XLEN", work[destination])
  if waiting == 0 and length < buffer then
    redis.call("XADD", work[destination], "*", "w", item)
    length = length + 1
  else
    -- A queue that is not empty is always in the set (the feeder takes a producer out
    -- only as it empties its queue, in the same step), so only a first item adds it.
    if waiting == 0 then
      redis.call("SADD", producers, string.sub(queue, #producers + 2))
    end
    redis.call("RPUSH", queue, item)
    waiting = waiting + 1
  end
  queue_lengths[queue], stream_lengths[destination] = waiting, length
end

local function split_first(text)
  local space = string.find(text, " ", 1, true)
  if not space then
    return text, ""
  end
  return string.sub(text, 1, space - 1), string.sub(text, space + 1)
end

-- The fingerprint and the notification id of an item, from its idempotency record.
local function fingerprint_and_id(done)
  local _, rest = split_first(done)
  return split_first(rest)
end

-- The reply for a key that already had a record, or nil when that record is this request's
-- own in-flight marker (a STALE round coming back), so the request may go on.
local function verdict(record, done)
  local fingerprint, id = fingerprint_and_id(done)
  local kind, rest = split_first(record)
  if kind == "done" then
    local earlier_fingerprint, notification_id = split_first(rest)
    if earlier_fingerprint ~= fingerprint then
      return "CONFLICT"
    end
    return { "DUP", notification_id }
  end
  local owner, earlier_fingerprint = split_first(rest)
  if earlier_fingerprint ~= fingerprint then
    return "CONFLICT"
  end
  if owner ~= id then
    return "BUSY"
  end
  return nil
end

-- The suppression list's version, read once per call (every item is of this shard).
local list_version, now = nil, nil

-- nil when the item was planned with the list as it is, else the SUPPRESSIONS reply: the
-- list's version, and the entries active now among the item's fields (an entry with an end
-- time is active until then).
local function suppression_verdict(assumed, checks, known)
  if not list_version then
    list_version = redis.call("HGET", suppressed, "#v") or "0"
  end
  if list_version == "0" and assumed == "0" then
    return nil
  end
  local active = {}
  if checks ~= "" then
    local fields = {}
    for field in string.gmatch(checks, "%S+") do
      fields[#fields + 1] = field
    end
    local values = redis.call("HMGET", suppressed, unpack(fields))
    now = now or now_ms()
    for i, field in ipairs(fields) do
      local value = values[i]
      if value then
        local until_ms = tonumber(string.match(value, "^(%d+)|"))
        if until_ms == 0 or until_ms > now then
          active[#active + 1] = field
          active[#active + 1] = value
        end
      end
    end
  end
  if list_version == assumed then
    local planned, count = {}, 0
    for field in string.gmatch(known, "%S+") do
      planned[field] = true
      count = count + 1
    end
    local same = #active == 2 * count
    for i = 1, #active, 2 do
      same = same and planned[active[i]] == true
    end
    if same then
      return nil
    end
  end
  local reply = { "SUPPRESSIONS", list_version }
  for _, part in ipairs(active) do
    reply[#reply + 1] = part
  end
  return reply
end

local broken = wrong_type({ "stream", "stream", "stream", "stream", "zset", "hash", "set", "set" })
if broken then
  return broken
end

local replies, accepted, all_accepted = {}, {}, true
local argi, keyi, last = 6, 9, #ARGV
while argi <= last do
  local done, settings_version = ARGV[argi], ARGV[argi + 1]
  local assumed, checks, known = ARGV[argi + 2], ARGV[argi + 3], ARGV[argi + 4]
  argi = argi + 3
  local record = ARGV[argi + 2]
  local shared_data, data_expires_at, data_key = ARGV[argi + 3], nil, nil
  local idem, ntf, rcpt, queue = KEYS[keyi], KEYS[keyi + 1], KEYS[keyi + 2], KEYS[keyi + 3]
  keyi = keyi + 4
  if shared_data ~= "" then
    data_expires_at, data_key = ARGV[argi + 4], KEYS[keyi]
    argi, keyi = argi + 1, keyi + 1
  end
  local work_count, indexed_until, index = tonumber(ARGV[argi + 4]), nil, nil
  if not work_count then -- "<count> <until>": indexed by its cancellation key until then
    local count
    count, indexed_until = string.match(ARGV[argi + 4], "^(%d+) (%d+)$")
    work_count, index, keyi = tonumber(count), KEYS[keyi], keyi + 1
  end
  local first_work = argi + 5
  argi = first_work + 2 * work_count

  -- Read the recipient's settings version, then claim the key as done or read what an
  -- earlier request left there. A key of the wrong type fails this item alone, before
  -- anything of it is written.
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
    reply = verdict(earlier, done)
  end
  if reply == nil then
    local again = nil
    if (version or "0") ~= settings_version then
      again = { "STALE", redis.call("HGETALL", rcpt) }
    else
      again = suppression_verdict(assumed, checks, known)
    end
    if again then
      -- Planned again by the caller: the key stays this request's meanwhile.
      local fingerprint, id = fingerprint_and_id(done)
      redis.call("SET", idem, "pending " .. id .. " " .. fingerprint, "PX", pending_ttl)
      reply = again
    else
      if earlier then -- this request's own in-flight marker: now it is done
        redis.call("SET", idem, done, "PX", idem_ttl)
      end
      redis.call("SET", ntf, record, "PX", idem_ttl)
      if index then -- with a cancellation key: found by it until it expires
        local _, id = fingerprint_and_id(done)
        redis.call("ZADD", index, indexed_until, id)
        if redis.call("PEXPIRETIME", index) < tonumber(indexed_until) then
          redis.call("PEXPIREAT", index, indexed_until)
        end
      end
      if data_key then
        redis.call("HSET", data_key, "d", shared_data, "n", work_count)
        redis.call("PEXPIREAT", data_key, data_expires_at)
      end
      accepted[#accepted + 1] = #replies + 1
      for w = first_work, argi - 1, 2 do
        admit(ARGV[w], ARGV[w + 1], queue)
      end
      reply = "OK"
    end
  end
  if reply ~= "OK" then
    all_accepted = false
  end
  replies[#replies + 1] = reply
end
append_events(events, joined, spans, all_accepted, accepted)
return replies
