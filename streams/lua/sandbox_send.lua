-- Record one call to the sandbox provider and, for a send, remember it per idempotency key.
--
-- KEYS: sent stream (every call), done hash (idempotency key -> first message id)
-- ARGV: idempotent ("1" or "0"), outcome (sent|transient|permanent|rate_limited|bug),
--       new message id (used only when a send is not a repeat the provider deduplicates),
--       delivery id, idempotency key, channel, address, attempt
--
-- duplicate is "1" when an earlier call with the same idempotency key already succeeded.
-- A sent outcome with an already-sent key returns the first message id when idempotent
-- (nothing new is sent) and the new one otherwise; the hash keeps the first either way.
--
-- Reply: {message id ("" unless sent), duplicate ("0" or "1")}

local sent, done = KEYS[1], KEYS[2]
local idempotent, outcome, new_id = ARGV[1], ARGV[2], ARGV[3]
local delivery_id, idempotency_key, channel = ARGV[4], ARGV[5], ARGV[6]
local address, attempt = ARGV[7], ARGV[8]

local first = redis.call("HGET", done, idempotency_key)
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
  if not first then
    redis.call("HSET", done, idempotency_key, message_id)
  end
  fields[#fields + 1] = "message_id"
  fields[#fields + 1] = message_id
end
redis.call("XADD", sent, "*", unpack(fields))
return { message_id, duplicate }
