-- Accept a batch of notifications on one shard, each atomically and independently.
--
-- KEYS: events, work:high, work:normal, work:low, delayed,
--       then per item: idempotency record, notification record, recipient settings.
-- ARGV: idempotency ttl (ms), in-flight marker ttl (ms), prefix of notification record keys,
--       then per item: fingerprint, request token, expected settings version, notification
--       id, notification record, the item's events (one JSON array: one stream entry),
--       work item count, then per work item: target (high|normal|low|delayed), due time in
--       ms (delayed only), encoded item.
--
-- Only the notification record, the events and the work items are written: a delivery's
-- state hash is created by the first worker that touches it (absent means "as accepted"),
-- which keeps this script to a handful of commands per notification. The record lives as
-- long as the idempotency record that points to it.
--
-- Reply, one entry per item:
--   {"OK"}               accepted: everything written
--   {"DUP", record}      same key, same body: the first notification's record, nothing
--                        written
--   {"CONFLICT"}         same key, different body
--   {"BUSY"}             same key, the first request is still in flight
--   {"STALE", settings}  the recipient's settings changed since the caller read them; the
--                        caller plans again and calls again with the same token
--
-- Idempotency record value: "done <fingerprint> <notification id>" or
-- "pending <token> <fingerprint>".

local events, delayed = KEYS[1], KEYS[5]
local work = { high = KEYS[2], normal = KEYS[3], low = KEYS[4] }
local idem_ttl, pending_ttl, record_prefix = ARGV[1], ARGV[2], ARGV[3]

local function split_first(text)
  local space = string.find(text, " ", 1, true)
  if not space then
    return text, ""
  end
  return string.sub(text, 1, space - 1), string.sub(text, space + 1)
end

local argi = 4
local function next_arg()
  argi = argi + 1
  return ARGV[argi - 1]
end

local function next_item()
  local item = {}
  item.fingerprint, item.token = next_arg(), next_arg()
  item.settings_version, item.id, item.record = next_arg(), next_arg(), next_arg()
  item.events = next_arg()
  item.work = {}
  for j = 1, tonumber(next_arg()) do
    item.work[j] = { target = next_arg(), due_ms = next_arg(), item = next_arg() }
  end
  return item
end

-- nil when the item may be written, otherwise the reply for it.
local function verdict(item)
  local record = redis.call("GET", item.idem)
  if record then
    local kind, rest = split_first(record)
    if kind == "done" then
      local fingerprint, notification_id = split_first(rest)
      if fingerprint ~= item.fingerprint then
        return { "CONFLICT" }
      end
      -- Same shard, so the same hash tag as the keys this call declares.
      return { "DUP", redis.call("GET", record_prefix .. notification_id) or "" }
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
  if version ~= item.settings_version then
    redis.call("SET", item.idem, "pending " .. item.token .. " " .. item.fingerprint, "PX", pending_ttl)
    return { "STALE", redis.call("HGETALL", item.rcpt) }
  end
  return nil
end

local function write(item)
  redis.call("SET", item.ntf, item.record, "PX", idem_ttl)
  redis.call("XADD", events, "*", "e", item.events)
  for _, entry in ipairs(item.work) do
    if entry.target == "delayed" then
      redis.call("ZADD", delayed, entry.due_ms, entry.item)
    else
      redis.call("XADD", work[entry.target], "*", "w", entry.item)
    end
  end
  redis.call("SET", item.idem, "done " .. item.fingerprint .. " " .. item.id, "PX", idem_ttl)
end

local replies = {}
local keyi = 6
while argi <= #ARGV do
  local item = next_item()
  item.idem, item.ntf, item.rcpt = KEYS[keyi], KEYS[keyi + 1], KEYS[keyi + 2]
  keyi = keyi + 3

  local reply = verdict(item)
  if reply == nil then
    write(item)
    reply = { "OK" }
  end
  replies[#replies + 1] = reply
end
return replies
