-- Accept a batch of notifications on one shard, each atomically and independently.
--
-- KEYS: events, work:high, work:normal, work:low, delayed,
--       then per item: idempotency record, notification hash, recipient settings,
--       then one delivery hash per delivery of that item.
-- ARGV: item count, idempotency ttl (ms), in-flight marker ttl (ms),
--       then per item: fingerprint, request token, expected settings version, response,
--         notification field count, field/value pairs,
--         event count, encoded events,
--         delivery count, then per delivery: target (high|normal|low|delayed|none), score,
--           encoded work item, delivery field count, field/value pairs.
--
-- Reply, one entry per item:
--   {"OK"}               accepted: everything written
--   {"DUP", response}    same key, same body: the first answer, nothing written
--   {"CONFLICT"}         same key, different body
--   {"BUSY"}             same key, the first request is still in flight
--   {"STALE", settings}  the recipient's settings changed since the caller read them; the
--                        caller recomputes the fan-out and calls again with the same token
--
-- Idempotency record value: "done <fingerprint> <response>" or "pending <token> <fingerprint>".

local events, delayed = KEYS[1], KEYS[5]
local work = { high = KEYS[2], normal = KEYS[3], low = KEYS[4] }
local item_count = tonumber(ARGV[1])
local idem_ttl, pending_ttl = ARGV[2], ARGV[3]

local argi, keyi = 4, 6
local function next_arg()
  argi = argi + 1
  return ARGV[argi - 1]
end
local function next_key()
  keyi = keyi + 1
  return KEYS[keyi - 1]
end
local function take(count)
  local values = {}
  for j = 1, count do
    values[j] = next_arg()
  end
  return values
end

local function split_first(text)
  local space = string.find(text, " ", 1, true)
  if not space then
    return text, ""
  end
  return string.sub(text, 1, space - 1), string.sub(text, space + 1)
end

-- nil when the item may be written, otherwise the reply for it.
local function verdict(item)
  local record = redis.call("GET", item.idem)
  if record then
    local kind, rest = split_first(record)
    if kind == "done" then
      local fingerprint, response = split_first(rest)
      if fingerprint ~= item.fingerprint then
        return { "CONFLICT" }
      end
      return { "DUP", response }
    end
    local owner, fingerprint = split_first(rest)
    if fingerprint ~= item.fingerprint then
      return { "CONFLICT" }
    end
    if owner ~= item.token then
      return { "BUSY" }
    end
  end
  local version = redis.call("HGET", item.rcpt, "v") or "0"
  if version ~= item.expected_version then
    redis.call("SET", item.idem, "pending " .. item.token .. " " .. item.fingerprint, "PX", pending_ttl)
    return { "STALE", redis.call("HGETALL", item.rcpt) }
  end
  return nil
end

local function write(item)
  redis.call("HSET", item.ntf, unpack(item.ntf_fields))
  for _, event in ipairs(item.events) do
    redis.call("XADD", events, "*", "e", event)
  end
  for _, delivery in ipairs(item.deliveries) do
    redis.call("HSET", delivery.key, unpack(delivery.fields))
    if delivery.target == "delayed" then
      redis.call("ZADD", delayed, delivery.score, delivery.work)
    elseif delivery.target ~= "none" then
      redis.call("XADD", work[delivery.target], "*", "w", delivery.work)
    end
  end
  redis.call("SET", item.idem, "done " .. item.fingerprint .. " " .. item.response, "PX", idem_ttl)
end

local replies = {}
for i = 1, item_count do
  local item = { idem = next_key(), ntf = next_key(), rcpt = next_key() }
  item.fingerprint, item.token = next_arg(), next_arg()
  item.expected_version, item.response = next_arg(), next_arg()
  item.ntf_fields = take(tonumber(next_arg()))
  item.events = take(tonumber(next_arg()))
  item.deliveries = {}
  for j = 1, tonumber(next_arg()) do
    local delivery = { key = next_key(), target = next_arg(), score = next_arg(), work = next_arg() }
    delivery.fields = take(tonumber(next_arg()))
    item.deliveries[j] = delivery
  end

  local reply = verdict(item)
  if reply == nil then
    write(item)
    reply = { "OK" }
  end
  replies[i] = reply
end
return replies
