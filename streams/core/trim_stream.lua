-- Trim one stream to what is still needed, atomically: no consumer group can move between
-- the look at the groups and the trim.
--
-- An entry is removed only when it is older than the retention and every group on the
-- stream is done with it: no group has it pending, and every group has been given it.
--
-- Keys and arguments: ``streams.core.retention.trim_stream_call`` lays them out.
-- KEYS: the stream
-- ARGV: retention (ms), then the groups that must exist before anything is trimmed
--
-- Reply: {entries removed, the MINID trimmed to or "", the missing group or ""}

local stream, retention_ms = KEYS[1], tonumber(ARGV[1])

local function parse(id)
  local dash = string.find(id, "-", 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end

local function older(a, b)
  local a_ms, a_seq = parse(a)
  local b_ms, b_seq = parse(b)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

if redis.call("EXISTS", stream) == 0 then
  return { 0, "", "" }
end

-- Ids are the Redis clock's milliseconds at XADD: compare with the same clock.
local keep_from = string.format("%d-0", math.max(0, now_ms() - retention_ms))

local present = {}
for _, group in ipairs(redis.call("XINFO", "GROUPS", stream)) do
  local info = {}
  for i = 1, #group, 2 do
    info[group[i]] = group[i + 1]
  end
  present[info["name"]] = true
  -- The first entry this group has not been given yet (ids only grow, so the next
  -- possible id is the last delivered one's sequence plus one).
  local last = info["last-delivered-id"]
  local dash = string.find(last, "-", 1, true)
  local undelivered = string.sub(last, 1, dash) .. tostring(tonumber(string.sub(last, dash + 1)) + 1)
  if older(undelivered, keep_from) then
    keep_from = undelivered
  end
  if info["pending"] > 0 then
    local oldest_pending = redis.call("XPENDING", stream, info["name"])[2]
    if older(oldest_pending, keep_from) then
      keep_from = oldest_pending
    end
  end
end

for i = 2, #ARGV do
  if not present[ARGV[i]] then
    return { 0, "", ARGV[i] }
  end
end
return { redis.call("XTRIM", stream, "MINID", keep_from), keep_from, "" }
