-- Record calls to the sandbox provider and, for a send, remember it per idempotency key.
--
-- Keys and arguments: ``app.providers.sandbox.sandbox_send_call`` lays them out.
-- KEYS: sent stream (every call), then per call: the key remembering its idempotency key's
--       first message id
-- ARGV: idempotent ("1" or "0"), how long a send is remembered (ms), then per call: outcome
--       (sent|transient|permanent|rate_limited|bug), new message id (used only when a send
--       is not a repeat the provider deduplicates), delivery id, idempotency key, channel,
--       address, attempt
--
-- Calls are handled one after the other, so a repeat within one batch is seen as a repeat.
-- duplicate is "1" when an earlier call with the same idempotency key already succeeded
-- within the memory. A sent outcome with an already-sent key returns the first message id
-- when idempotent (nothing new is sent) and the new one otherwise; the first is kept either
-- way, and forgotten when the memory runs out, as a real provider's deduplication window.
--
-- Reply, one entry per call: {message id ("" unless sent), duplicate ("0" or "1")}

local sent = KEYS[1]
local idempotent, remember_ms = ARGV[1], ARGV[2]

local replies = {}
local keyi = 2
for argi = 3, #ARGV, 7 do
  local outcome, new_id = ARGV[argi], ARGV[argi + 1]
  local delivery_id, idempotency_key, channel = ARGV[argi + 2], ARGV[argi + 3], ARGV[argi + 4]
  local address, attempt = ARGV[argi + 5], ARGV[argi + 6]
  local done = KEYS[keyi]
  keyi = keyi + 1

  -- A send claims the key and reads an earlier claim in one command.
  local first = nil
  if outcome == "sent" then
    first = redis.call("SET", done, new_id, "NX", "GET", "PX", remember_ms)
  else
    first = redis.call("GET", done)
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
