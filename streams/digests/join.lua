-- Notifications join the digests open for their (recipient, type, key), opening one when none
-- is, each atomically with the other notifications joining it and with its sealing. One call
-- joins a batch's notifications of one shard, in order.
--
-- Keys and arguments: ``streams.digests.store.digest_join_call`` lays out one notification's;
-- a call has those of each notification one after the other.
-- KEYS: the open digest's id (a string), the digest (a hash), its items (a hash) and their
--       order (a list), the shard's digests by closing time, the notification's join
-- ARGV: the digest id the caller found open, or a new one derived from (recipient, type, key,
--       now) when it found none ("1" / "0" says which), now (ms), when a new digest closes,
--       at most how many items and bytes a digest holds, how long (ms) a closed digest and a
--       join are kept, the notification id, its item (JSON), then for a new digest: the
--       recipient id, type, key, producer, locale, and the recipient (JSON, its addresses)
--
-- A notification that joined before (the same producer request answered again) is not added
-- twice: its join names the digest. A digest that fills up (items or bytes) is due at once,
-- and the next notification opens a new one.
--
-- Reply: for each notification {"JOINED", digest id, items, closes ms}, or {"RETRY", an id
-- or ""} when the caller asked about the wrong digest: the one the notification joined
-- before, or the one open now ("": none; the caller's was sealed or another opened since).

local KEYS_EACH, ARGS_EACH = 6, 15 -- of each notification

local function join(k, a)
  local open, digest, items, order = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local due, joined = KEYS[k + 5], KEYS[k + 6]
  local id, found_open = ARGV[a + 1], ARGV[a + 2] == "1"
  local now, closes = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local max_items, max_bytes = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local keep_ms, nid, item = tonumber(ARGV[a + 7]), ARGV[a + 8], ARGV[a + 9]

  local before = redis.call("GET", joined)
  if before and before ~= id then
    return { "RETRY", before } -- it joined that one: ask again with its keys
  elseif before then
    local state = redis.call("HMGET", digest, "count", "closes_ms")
    return { "JOINED", id, tonumber(state[1] or 0), tonumber(state[2] or 0) }
  end
  local current = redis.call("GET", open)
  if current and current ~= id then
    return { "RETRY", current }
  end
  if not current then
    if found_open or redis.call("EXISTS", digest) == 1 then
      return { "RETRY", "" }
    end
    redis.call("HSET", digest, "state", "open", "opened_ms", now, "closes_ms", closes,
        "count", 0, "bytes", 0, "recipient_id", ARGV[a + 10], "type", ARGV[a + 11],
      "key", ARGV[a + 12], "producer", ARGV[a + 13], "locale", ARGV[a + 14], "open_key", open)
    redis.call("ZADD", due, closes, id)
    redis.call("SET", open, id, "PX", closes - now + keep_ms)
  else
    closes = tonumber(redis.call("HGET", digest, "closes_ms"))
  end
  redis.call("HSET", items, nid, item)
  redis.call("RPUSH", order, nid)
  redis.call("HSET", digest, "recipient", ARGV[a + 15])
  local count = redis.call("HINCRBY", digest, "count", 1)
  local bytes = redis.call("HINCRBY", digest, "bytes", #item)
  redis.call("SET", joined, id, "PX", closes - now + keep_ms)
  if count >= max_items or bytes >= max_bytes then
    -- Full: due now, and closed to further joins.
    redis.call("ZADD", due, now, id)
    redis.call("DEL", open)
    redis.call("HSET", digest, "state", "sealed", "closes_ms", now)
    closes = now
  end
  return { "JOINED", id, count, closes }
end

local replies = {}
for i = 0, #KEYS / KEYS_EACH - 1 do
  replies[#replies + 1] = join(i * KEYS_EACH, i * ARGS_EACH)
end
return replies
