-- Let the state hashes of ended deliveries leave Redis soon, now that the read model has
-- them.
--
-- Keys and arguments: ``streams.delivery.state_release.release_states_call`` lays them out.
-- KEYS: per delivery, its state hash
-- ARGV: how long (ms) a released state stays, then per delivery the version the read model
--       has of it
--
-- A state is released only when its delivery ended for good (``PROVIDER_ACCEPTED`` or
-- ``ENDED_UNSENT``, written from ``streams.core.vocabulary``: a FAILED one stays as long as its dead letter, which
-- a replay re-checks) and the read model has its version: a state that moved on since (a
-- provider's receipt, an inbox read) waits for that change's projection. A lifetime only
-- ever gets shorter (PEXPIRE ... LT); 0 deletes the hash at once. A key that holds something
-- other than a hash is left alone, and so is a cancelled delivery's state that is ``held``
-- (``cancel.lua``: a work item of it may still come, which must find it ended).
--
-- Reply: how many states were released.

local keep_ms = ARGV[1]
local released = 0
for i, key in ipairs(KEYS) do
  local state = redis.pcall("HMGET", key, "status", "version", "held")
  if not state.err then
    local status, version = state[1], tonumber(state[2] or "1")
    local ended = status and not state[3] and (PROVIDER_ACCEPTED[status] or ENDED_UNSENT[status])
    if ended and version <= tonumber(ARGV[i + 1]) then
      redis.call("PEXPIRE", key, keep_ms, "LT")
      released = released + 1
    end
  end
end
return released
