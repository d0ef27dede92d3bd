-- Functions several scripts share. Lua scripts in Redis cannot load one another, so
-- ``streams/scripts.py`` puts this file in front of each script that asks for it; line
-- numbers in a Redis error about such a script count from the top of this file.

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
-- entry of its own; building one large string in Lua costs more than the XADDs it would
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
