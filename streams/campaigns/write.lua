-- Change a campaign: one compare-and-set on its version, with the change's event.
--
-- Every change to a campaign (created, recipients added, started, paused, a batch
-- generated, ...) is read, decided in Python, and written here only if nobody changed the
-- campaign in between: the caller read version N and writes N + 1, or is told the version
-- now and decides again. So the decision can be ordinary code, and two changes racing
-- (a pause and the generator's checkpoint) can never both act on the same state.
--
-- Keys and arguments: ``streams.campaigns.store.campaign_write_call`` lays them out.
-- KEYS: the campaign's hash, its audience (a list), its upload keys (a hash), the shard's
--       campaigns (a sorted set by creation), the shard's due campaigns (a sorted set),
--       the shard's events, the audience a segment is being selected into (a list), the
--       producer's open campaigns and the recipients uploaded to them (a hash)
-- ARGV: the version read (0: the campaign must not exist yet), the campaign's id, the
--       number of field/value pairs to set, the pairs, the number of field/increment
--       pairs, the pairs, the number of chunks to append to the audience, the chunks, the
--       audience chunk to empty ("": none; a generated chunk is of no more use), "1" to make
--       the selected audience the audience (a segment's selection is complete), the upload
--       key to record ("": none) and what it added, the due time ("": unchanged, "-": not
--       due), the creation time to list it by ("": already listed), the encoded events
--       ("": none), the change to the producer's open campaigns (1 created, -1 ended, 0)
--       and to the recipients uploaded to them, and the limits: open campaigns, recipients
--       of one campaign, recipients of all open campaigns
--
-- Reply: {"OK", version} when written; {"MOVED", version} when the campaign is not at the
-- version read (0: it does not exist), nothing written; {"UPLOADED", added} when the upload
-- key was recorded before (nothing written: the upload was a retry); {"OPEN", limit},
-- {"AUDIENCE", limit} or {"OPEN_AUDIENCE", limit} when the change would pass that limit,
-- nothing written. The limits are checked here, with the write, so that two uploads racing
-- cannot pass one together.

local record, audience, uploads, listed, due, events, selected, open = unpack(KEYS)
local next_arg = arguments(1)
local expected, id = next_arg(), next_arg()

local version = redis.call("HGET", record, "version") or "0"
if version ~= expected then
  return { "MOVED", tonumber(version) }
end

local sets = {}
for _ = 1, tonumber(next_arg()) * 2 do
  sets[#sets + 1] = next_arg()
end
local increments = {}
for _ = 1, tonumber(next_arg()) do
  increments[#increments + 1] = { next_arg(), next_arg() }
end
local chunks = {}
for _ = 1, tonumber(next_arg()) do
  chunks[#chunks + 1] = next_arg()
end
local emptied, adopt, upload, added = next_arg(), next_arg(), next_arg(), next_arg()
local due_at, created, encoded = next_arg(), next_arg(), next_arg()
local opened, uploaded = tonumber(next_arg()), tonumber(next_arg())
local max_open, max_audience, max_open_audience =
  tonumber(next_arg()), tonumber(next_arg()), tonumber(next_arg())

if upload ~= "" then
  local earlier = redis.call("HGET", uploads, upload)
  if earlier then
    return { "UPLOADED", tonumber(earlier) }
  end
end

if opened ~= 0 or uploaded ~= 0 then
  local campaigns = tonumber(redis.call("HGET", open, "campaigns") or "0")
  local recipients = tonumber(redis.call("HGET", open, "recipients") or "0")
  if opened > 0 and campaigns + opened > max_open then
    return { "OPEN", max_open }
  end
  if uploaded > 0 then
    local had = tonumber(redis.call("HGET", record, "audience") or "0")
    if had + uploaded > max_audience then
      return { "AUDIENCE", max_audience }
    end
    if recipients + uploaded > max_open_audience then
      return { "OPEN_AUDIENCE", max_open_audience }
    end
  end
  -- Campaigns opened before the limits were counted are not in the tally: never below 0.
  redis.call("HSET", open, "campaigns", math.max(0, campaigns + opened),
    "recipients", math.max(0, recipients + uploaded))
end

if upload ~= "" then
  redis.call("HSET", uploads, upload, added)
end

local now = tostring(version + 1)
redis.call("HSET", record, "version", now, unpack(sets))
for _, pair in ipairs(increments) do
  redis.call("HINCRBY", record, pair[1], pair[2])
end
if #chunks > 0 then
  redis.call("RPUSH", audience, unpack(chunks))
end
if adopt == "1" then
  redis.call("DEL", audience)
  if redis.call("EXISTS", selected) == 1 then
    redis.call("RENAME", selected, audience)
  end
end
if emptied ~= "" then
  redis.call("LSET", audience, emptied, "")
end
if due_at == "-" then
  redis.call("ZREM", due, id)
elseif due_at ~= "" then
  redis.call("ZADD", due, due_at, id)
end
if created ~= "" then
  redis.call("ZADD", listed, created, id)
end
if encoded ~= "" then
  redis.call("XADD", events, "*", "e", encoded)
end
return { "OK", tonumber(now) }
