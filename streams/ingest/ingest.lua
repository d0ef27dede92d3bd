-- Ingest a batch of notifications on one shard, each independently, all in one atomic step.
--
-- Keys and arguments: ``streams.ingest.writer.ingest_call`` lays them out.
-- KEYS: events, work:high, work:normal, work:low, delayed, suppression list, the producers
--       with NORMAL items queued, those with LOW items queued (``streams.delivery.fairness``),
--       the shard's digests by closing time, then
--       per item: idempotency record, notification record, recipient settings, its
--       producer's queue of its priority, its data hash when its work items share their
--       template data, its cancellation index when it has a cancellation key, and the three
--       keys of its digest (``shared.lua``'s) when it joins one.
-- ARGV: idempotency ttl (ms), in-flight marker ttl (ms), every item's events joined into one
--       JSON array (``codec.join_events``), each item's first and last byte in that array as
--       one string of numbers ("1 420 422 845 ..."), the fairness buffer (items a NORMAL or
--       LOW work stream may hold before producers' items queue), now (ms), at most how many
--       bytes a digest holds, how long (ms) an open digest's key outlives its closing, then
--       per item: its idempotency record
--       when done ("done <fingerprint> <notification id>"), expected settings version,
--       the suppression list's version it was planned with, the list fields of its
--       addresses ("<channel>:<digest>", space-separated; "" when it assumed an empty list),
--       the fields it found suppressed (the same way), notification record, shared template
--       data ("" for none) followed, only when there
--       is some, by the time it expires (ms since the epoch), work item count (with a
--       cancellation key: "<count> <until when its index keeps it, ms since the epoch>"; one
--       argument less for every notification without one; followed by "+" when it joins a
--       digest), then per work
--       item: where it goes (high, normal or low for a work stream; the due time in ms for
--       ``delayed``) and the encoded item; then, when it joins a digest: the digest's id, how
--       it asks ("open": it was seen open; "new": none was), when a new one closes, at most
--       how many items it holds, the item ("<notification id> <data JSON>"), the recipient
--       (JSON), and for "new" the recipient id, type, key, producer and locale of the digest
--       it opens.
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
-- A notification of a digest type accepted on its recipient's home shard joins its digest in
-- the same step, so it is never accepted without joining. The digest it names is the caller's
-- guess (the one the process last saw open), and its record names it too (so nothing else
-- records the join); a wrong guess is answered like a recipient's changed settings: nothing
-- written, planned again with the digest open now.
--
-- Reply, one entry per item: a word, or a list when the item's answer carries data (a plain
-- word spares Lua, Redis and the client a list per accepted item):
--   "OK"                 accepted: everything written
--   {"JOINED", id, count, closes ms}
--                        accepted, and joined digest ``id`` as its ``count``-th item
--   {"DIGEST", id}       the digest named is not the one to join: ``id`` is open ("": none
--                        is, a new one may open); the caller plans again with it
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
-- What the call's digest joins share (``shared.lua``); none when no item joins one (now 0).
local digests = ARGV[6] ~= "0" and digest_call(KEYS[9], ARGV[6], ARGV[7], ARGV[8]) or nil

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

local broken = wrong_type({ "stream", "stream", "stream", "stream", "zset", "hash", "set", "set",
  digests and "zset" or nil })
if broken then
  return broken
end

-- Join an accepted notification to its digest (its ARGV from ``a`` on, its KEYS from ``k``
-- on), opening it when none was (``open_closes`` nil): its reply.
local function join_digest(a, k, open_closes)
  local id, closes = ARGV[a], open_closes
  if closes == nil then
    closes = tonumber(ARGV[a + 2])
    digest_open(digests, k, id, closes, a + 6)
  end
  local count
  count, closes = digest_add(
    digests, k, id, closes, ARGV[a + 4], ARGV[a + 5], tonumber(ARGV[a + 3]))
  return { "JOINED", id, count, closes }
end

local replies, accepted, all_accepted = {}, {}, true
local argi, keyi, last = 9, 10, #ARGV
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
  local join, join_k = nil, nil -- where its digest's ARGV and KEYS begin, when it joins one
  if not work_count then -- "<count> <until>": indexed by its cancellation key until then
    local count, until_ms, joins = string.match(ARGV[argi + 4], "^(%d+) ?(%d*)(%+?)$")
    work_count = tonumber(count)
    if until_ms ~= "" then
      indexed_until, index, keyi = until_ms, KEYS[keyi], keyi + 1
    end
    join = joins == "+" or nil
  end
  local first_work = argi + 5
  argi = first_work + 2 * work_count
  if join then
    join, join_k, keyi = argi, keyi, keyi + 3
    argi = argi + (ARGV[argi + 1] == "new" and 11 or 6)
  end

  -- Read the recipient's settings version, then claim the key as done or read what an
  -- earlier request left there. A key of the wrong type fails this item alone, before
  -- anything of it is written.
  local version = redis.pcall("HGET", rcpt, "v")
  local earlier = nil
  if not (type(version) == "table" and version.err) then
    earlier = redis.pcall("SET", idem, done, "PX", idem_ttl, "NX", "GET")
  end
  local reply, ok = nil, false
  if type(version) == "table" and version.err then
    reply = { "BROKEN", version.err }
  elseif type(earlier) == "table" and earlier.err then
    reply = { "BROKEN", earlier.err }
  elseif earlier then
    reply = verdict(earlier, done)
  end
  if reply == nil then
    local again, open_closes = nil, nil
    if (version or "0") ~= settings_version then
      again = { "STALE", redis.call("HGETALL", rcpt) }
    else
      again = suppression_verdict(assumed, checks, known)
    end
    if join and not again then
      local named
      open_closes, named = digest_to_join(join_k, ARGV[join], ARGV[join + 1])
      if open_closes == false then
        again = { "DIGEST", named }
      end
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
      ok = true
      for w = first_work, first_work + 2 * work_count - 1, 2 do
        admit(ARGV[w], ARGV[w + 1], queue)
      end
      reply = join and join_digest(join, join_k, open_closes) or "OK"
    end
  end
  if not ok then
    all_accepted = false
  end
  replies[#replies + 1] = reply
end
append_events(events, joined, spans, all_accepted, accepted)
return replies
