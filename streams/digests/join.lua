-- Notifications join the digests open for their (recipient, type, key), opening one when none
-- is, each atomically with the other notifications joining it and with its sealing. One call
-- joins a batch's notifications of one shard, in order.
--
-- Keys and arguments: ``streams.digests.store.digest_join_call`` lays them out: first what
-- the call's notifications share, then each notification's, one after the other.
-- KEYS: the shard's digests by closing time (members "<id> <open key>": a closer seals a
--       digest by both); then per notification: the open digest of its (recipient, type,
--       key) (a string: "<id> <closes ms>"), the digest (a hash), its items (a list of
--       "<notification id> <data JSON>", in the order they joined), and which digest each
--       notification made in its hour joined (a hash by notification id)
-- ARGV: now (ms), at most how many bytes a digest holds, how long (ms) an open digest's key
--       outlives its closing; then per notification: the digest id the caller found open,
--       or a new one derived from (recipient, type, key, now) when it found none; how it
--       asks ("open": it found that one open; "new": none; "again": its request was
--       answered before, so it may have joined; "joined": its record names the digest it
--       joined as the ingest script accepted it); when a new digest closes; at most how many
--       items a digest holds; the notification id; its item (JSON); the recipient (JSON, its
--       addresses); when its hour's joins expire (ms since the epoch); then for a new
--       digest ("" otherwise): the recipient id, type, key, producer, locale
--
-- A notification that joined before (the same producer request answered again) is not added
-- twice: its join in its hour's hash names the digest, or its record does when the ingest
-- script joined it (the caller asks "joined"). A digest that fills up (items or bytes) is due at once,
-- and the next notification opens a new one.
--
-- A join is the common path, kept short: the open digest read (its closing time rides in
-- its value), the item pushed (the list's length is the count, kept nowhere else), the bytes
-- counted, the latest recipient written (``shared.lua``'s steps, which the ingest script also
-- joins by), and the join recorded as a field of its hour's hash (a key per notification,
-- with its own expiry, cost a fifth of the whole join), whose expiry is set once per call.
--
-- Reply: for each notification {"JOINED", digest id, items, closes ms}, or {"RETRY", an id
-- or ""} when the caller asked about the wrong digest: the one the notification joined
-- before, or the one open now ("": none; the caller's was sealed or another opened since).

local KEYS_EACH, ARGS_EACH = 4, 13 -- of each notification, after the shared ones
local call = digest_call(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) -- ``shared.lua``'s digest functions
local expiring = {} -- the hours' hashes whose expiry this call has set

-- The reply for a notification that joined digest ``id`` before: its items now.
local function joined_before(k, id)
  local closes_ms = redis.call("HGET", KEYS[k + 1], "closes_ms")
  return { "JOINED", id, redis.call("LLEN", KEYS[k + 2]), tonumber(closes_ms or 0) }
end

local function join(k, a)
  local id, how, closes = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local max_items, nid, joined = tonumber(ARGV[a + 4]), ARGV[a + 5], KEYS[k + 3]

  if how == "joined" then
    return joined_before(k, id)
  elseif how == "again" then
    local before = redis.call("HGET", joined, nid)
    if before and before ~= id then
      return { "RETRY", before } -- it joined that one: ask again with its keys
    elseif before then
      return joined_before(k, id)
    end
  end
  local open_closes, named = digest_to_join(k, id, how)
  if open_closes == false then
    return { "RETRY", named }
  elseif open_closes == nil then
    digest_open(call, k, id, closes, a + 9)
  else
    closes = open_closes
  end
  local count
  count, closes = digest_add(call, k, id, closes, nid .. " " .. ARGV[a + 6], ARGV[a + 7], max_items)
  redis.call("HSET", joined, nid, id)
  if not expiring[joined] then -- the hour's hash: its expiry asked for once a call
    redis.call("PEXPIREAT", joined, ARGV[a + 8], "NX")
    expiring[joined] = true
  end
  return { "JOINED", id, count, closes }
end

local replies = {}
for i = 0, (#KEYS - 1) / KEYS_EACH - 1 do
  replies[#replies + 1] = join(2 + i * KEYS_EACH, 3 + i * ARGS_EACH)
end
return replies
