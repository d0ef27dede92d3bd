-- What every script shares. Lua scripts in Redis cannot load one another, so
-- ``streams/core/scripts.py`` puts this file in front of each script, after the vocabulary it
-- writes from ``streams/core/vocabulary.py`` (``STATUS``, the delivery statuses by name, the sets
-- the scripts decide by: ``TERMINAL``, ``PROVIDER_ACCEPTED``, ``ENDED_UNSENT``, and the
-- priorities' work streams, ``WORK_STREAM_NAMES``). Line
-- numbers in a Redis error about a script count from the top of that vocabulary.

-- The Redis clock, the one clock every script uses: processes on hosts whose clocks differ
-- still agree on it.
local function now_us()
  local time = redis.call("TIME")
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local function now_ms()
  local time = redis.call("TIME")
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A reader of ARGV from position ``first`` on: each call returns the next argument.
local function arguments(first)
  local index = first - 1
  return function()
    index = index + 1
    return ARGV[index]
  end
end

-- The work streams by the name of their priority (``Priority.stream_name``, listed in
-- ``WORK_STREAM_NAMES``), declared as KEYS[first], KEYS[first + 1], ... in that order, the
-- order of ``ShardKeys.work_streams``.
local function work_streams(first)
  local streams = {}
  for offset, name in ipairs(WORK_STREAM_NAMES) do
    streams[name] = KEYS[first + offset - 1]
  end
  return streams
end

-- Put an encoded work item where ``destination`` says: a work stream by its name, or else
-- ``delayed``, scored by the due time (ms) that ``destination`` then is.
local function enqueue(streams, delayed, destination, item)
  local stream = streams[destination]
  if stream then
    redis.call("XADD", stream, "*", "w", item)
  else
    redis.call("ZADD", delayed, destination, item)
  end
end

-- An error reply unless each of the first #wanted keys is absent or of its wanted type
-- ("stream" or "zset"); nil when all are. A script checks its shared keys first, since a
-- failure halfway would leave the items before it written without their events.
local function wrong_type(wanted)
  for k, kind_wanted in ipairs(wanted) do
    local kind = redis.call("TYPE", KEYS[k])["ok"]
    if kind ~= "none" and kind ~= kind_wanted then
      return redis.error_reply(
        "WRONGTYPE " .. KEYS[k] .. " holds a " .. kind .. ", not a " .. kind_wanted)
    end
  end
  return nil
end

-- Append the events of a call's written items to ``stream``: the joined array as it came
-- (one entry) when every item was written, else each written item's events cut out into an
-- entry of their own; building one large string in Lua costs more than the XADDs it would
-- save. ``joined`` and ``spans`` are ``codec.join_events``'s array and ``codec.span_text``'s
-- byte positions, which are read only when some item was not written; ``written`` holds
-- the written items' numbers.
local function append_events(stream, joined, spans, all_written, written)
  if all_written then
    if joined ~= "[]" then
      redis.call("XADD", stream, "*", "e", joined)
    end
    return
  end
  local bounds = {}
  for number in string.gmatch(spans, "%d+") do
    bounds[#bounds + 1] = tonumber(number)
  end
  for _, item in ipairs(written) do
    local first, last = bounds[2 * item - 1], bounds[2 * item]
    if last >= first then -- an item without events has (1, 0)
      redis.call("XADD", stream, "*", "e", "[" .. string.sub(joined, first, last) .. "]")
    end
  end
end

-- Inbox messages (``streams/inbox/store.py``). A message's state is "<read ms> <seen ms>
-- <archived ms> <the delivery's version>", 0 for what did not happen; its form is
-- ``streams.inbox.messages.MessageState``'s, written out as ``INBOX_STATE_PATTERN``.
local function inbox_state(text)
  local read, seen, archived, version = string.match(text or "", INBOX_STATE_PATTERN)
  return tonumber(read), tonumber(seen), tonumber(archived), tonumber(version)
end

-- Record an inbox change in the recipient's feed and publish it on ``live`` for the API
-- processes' realtime streams: the recipient, the feed key, the entry id, the kind, the
-- message id, the counts after it and ``body`` (the message for "new", its state
-- otherwise), separated by the unit separator. ``spec`` is { length, ttl_ms }: the feed
-- keeps that many entries, and lives that long after its newest (a stream takes a few KB
-- even with one entry, too much to keep for every recipient as long as the messages).
-- The inbox hash remembers the newest entry (``feed``) and, when the feed had expired
-- before this change made it anew, the last entry of the one that went (``lost``): a
-- client resuming from before ``lost`` missed changes no feed holds (``streams.inbox.live``).
local function inbox_feed(messages, feed, spec, live, recipient, kind, id, body)
  local counts = redis.call("HMGET", messages, "unread", "unseen", "feed")
  local unread, unseen, newest = counts[1] or "0", counts[2] or "0", counts[3]
  local gone = newest and redis.call("EXISTS", feed) == 0
  local entry = redis.call(
    "XADD", feed, "MAXLEN", "~", spec[1], "*",
    "k", kind, "id", id, "u", unread, "s", unseen, "b", body)
  redis.call("PEXPIRE", feed, spec[2])
  if gone then
    redis.call("HSET", messages, "feed", entry, "lost", newest)
  else
    redis.call("HSET", messages, "feed", entry)
  end
  local sep = "\31"
  redis.call("PUBLISH", live, table.concat(
    { recipient, feed, entry, kind, id, unread, unseen, body }, sep))
end

-- Digests (``streams/digests``), joined by ``digests/join.lua`` and, for a notification
-- accepted on its recipient's home shard, by ``ingest/ingest.lua`` in the same step. A join's
-- keys are KEYS[k] to KEYS[k + 2]: the open digest of its (recipient, type, key) (a string:
-- "<id> <closes ms>"), the digest (a hash), and its items (a list of "<notification id> <data
-- JSON>", in the order they joined). Which digest a notification joined is in its record
-- when the ingest script joined it, else in its hour's hash (``join.lua``). ``call`` is what a
-- script's joins share: { due = the shard's digests by closing time (members "<id> <open
-- key>"), now = ms, max_bytes = at most how many bytes of data a digest holds, keep_ms = how
-- long an open digest's key outlives its closing }.
local function digest_call(due, now, max_bytes, keep_ms)
  return { due = due, now = tonumber(now), max_bytes = tonumber(max_bytes),
    keep_ms = tonumber(keep_ms) }
end

-- Whether a notification may join digest ``id`` as its caller asks (``how``: "open", it found
-- that one open; "new" or "again", it asks for a new one when none is open): the closing
-- time of the open digest ``id``; nil when none is open and digest ``id`` may be opened; or
-- false and the id to ask with instead: the open one's, or "" (the caller's was sealed, or
-- another opened since).
local function digest_to_join(k, id, how)
  local current = redis.call("GET", KEYS[k])
  if current then
    local space = string.find(current, " ", 1, true)
    local open_id = space and string.sub(current, 1, space - 1) or current
    if open_id ~= id then
      return false, open_id
    end
    return tonumber(space and string.sub(current, space + 1)
      or redis.call("HGET", KEYS[k + 1], "closes_ms")) -- a value without its closing time
  end
  if how == "open" or redis.call("EXISTS", KEYS[k + 1]) == 1 then
    return false, ""
  end
  return nil
end

-- Open digest ``id`` closing at ``closes``; its recipient id, type, key, producer and locale
-- are ARGV[who] to ARGV[who + 4].
local function digest_open(call, k, id, closes, who)
  local open, now = KEYS[k], call.now
  redis.call("HSET", KEYS[k + 1], "state", "open", "opened_ms", now, "closes_ms", closes,
    "bytes", 0, "recipient_id", ARGV[who], "type", ARGV[who + 1], "key", ARGV[who + 2],
    "producer", ARGV[who + 3], "locale", ARGV[who + 4])
  redis.call("ZADD", call.due, closes, id .. " " .. open)
  redis.call("SET", open, id .. " " .. closes, "PX", closes - now + call.keep_ms)
end

-- Add ``entry`` ("<notification id> <data JSON>") to the open digest ``id`` with the latest
-- ``recipient`` (JSON). A digest that fills up (``max_items``, or the call's bytes) is due at
-- once, and closed to further joins. Returns its count and closing time.
local function digest_add(call, k, id, closes, entry, recipient, max_items)
  local open, digest = KEYS[k], KEYS[k + 1]
  local count = redis.call("RPUSH", KEYS[k + 2], entry)
  local bytes = redis.call("HINCRBY", digest, "bytes", #entry - string.find(entry, " ", 1, true))
  redis.call("HSET", digest, "recipient", recipient)
  if count >= max_items or bytes >= call.max_bytes then
    redis.call("ZADD", call.due, call.now, id .. " " .. open)
    redis.call("DEL", open)
    redis.call("HSET", digest, "state", "sealed", "closes_ms", call.now)
    closes = call.now
  end
  return count, closes
end
