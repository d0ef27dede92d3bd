-- Change a recipient's preferences or quiet hours on one shard's copy of its settings.
--
-- Every shard holds a copy (so ingest reads it inside its own single-slot script); the home
-- shard is written first and decides the version, the copies follow it.
--
-- Keys and arguments: ``streams.recipients.settings.recipient_settings_call`` lays them out.
-- KEYS: recipient settings, events
-- ARGV: expected version, new version, change (preferences|preference_off|quiet_hours|
--       quiet_hours_off|invalid_address|profile|copy), payload, encoded event ("" on a copy)
--   preferences: payload is "type:channel" names of disabled pairs joined by ","
--   preference_off: payload is the one "type:channel" pair to switch off (the others stay)
--   quiet_hours: payload is the JSON setting
--   invalid_address: payload is the field "x:<channel>:<address digest>" to set
--   profile: payload is the profile's JSON ("" removes it)
--   copy: payload is the home shard's whole hash as a JSON array of field, value, ...
--         (a copy that missed a change catches up with the next one)
--
-- Reply: "OK", "RETRY" (home: the version moved, read again) or "SKIP" (copy already newer).

local rcpt, events = KEYS[1], KEYS[2]
local expected, new_version, change, payload, event = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local current = tonumber(redis.call("HGET", rcpt, "v") or "0")
local is_home = event ~= ""
if is_home and current ~= tonumber(expected) then
  return "RETRY"
end
if not is_home and current >= tonumber(new_version) then
  return "SKIP"
end

if change == "preferences" then
  for _, field in ipairs(redis.call("HKEYS", rcpt)) do
    if string.sub(field, 1, 2) == "p:" then
      redis.call("HDEL", rcpt, field)
    end
  end
  for pair in string.gmatch(payload, "[^,]+") do
    redis.call("HSET", rcpt, "p:" .. pair, "0")
  end
elseif change == "preference_off" then
  redis.call("HSET", rcpt, "p:" .. payload, "0")
elseif change == "quiet_hours" then
  redis.call("HSET", rcpt, "qh", payload)
elseif change == "quiet_hours_off" then
  redis.call("HDEL", rcpt, "qh")
elseif change == "invalid_address" then
  redis.call("HSET", rcpt, payload, "1")
elseif change == "profile" then
  if payload == "" then
    redis.call("HDEL", rcpt, "pf")
  else
    redis.call("HSET", rcpt, "pf", payload)
  end
elseif change == "copy" then
  redis.call("DEL", rcpt)
  redis.call("HSET", rcpt, unpack(cjson.decode(payload)))
else
  return redis.error_reply("unknown change " .. change)
end
redis.call("HSET", rcpt, "v", new_version)
if is_home then
  redis.call("XADD", events, "*", "e", event)
end
return "OK"
