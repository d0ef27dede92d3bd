-- Record calls to the sandbox provider and, for a send, remember it per idempotency key.
--
-- KEYS: sent stream (every call), done hash (idempotency key -> first message id)
-- ARGV: idempotent ("1" or "0"), then per call: outcome
--       (sent|transient|permanent|rate_limited|bug), new message id (used only when a send
--       is not a repeat the provider deduplicates), delivery id, idempotency key, channel,
--       address, attempt
--
-- Calls are handled one after the other, so a repeat within one batch is seen as a repeat.
-- duplicate is "1" when an earlier call with the same idempotency key already succeeded.
-- A sent outcome with an already-sent key returns the first message id when idempotent
-- (nothing new is sent) and the new one otherwise; the hash keeps the first either way.
--
-- Reply, one entry per call: {message id ("" unless sent), duplicate ("0" or "1")}

local sent, done = KEYS[1], KEYS[2]
local idempotent = ARGV[1]

local replies = {}
for argi = 2, #ARGV, 7 do
  local outcome, new_id = ARGV[argi], ARGV[argi + 1]
  local delivery_id, idempotency_key, channel = ARGV[argi + 2], ARGV[argi + 3], ARGV[argi + 4]
  local address, attempt = ARGV[argi + 5], ARGV[argi + 6]

  -- A send claims the key in one command; only a repeat or another outcome reads it.
  local first = nil
  if outcome ~= "sent" or redis.call("HSETNX", done, idempotency_key, new_id) == 0 then
    first = redis.call("HGET", done, idempotency_key)
  end
  local duplicate = "0"
  if first then
    duplicate = "1"
  end

  local fields = {
    "delivery_id", delivery_id,
    "idempotency_key", idempotency_key,
    "channel", channel,
    "address", address,
    "attempt", attempt,
    "outcome", outcome,
    "duplicate", duplicate,
  }
  local message_id = ""
  if outcome == "sent" then
    if first and idempotent == "1" then
      message_id = first
    else
      message_id = new_id
    end
    fields[#fields + 1] = "message_id"
    fields[#fields + 1] = message_id
  end
  redis.call("XADD", sent, "*", unpack(fields))
  replies[#replies + 1] = { message_id, duplicate }
end
return replies
