-- Revoke a recipient's tokens: raise its revocation epoch and tell every API process, whose
-- open realtime streams of the recipient end (``streams.inbox.revocation``).
--
-- KEYS: the recipient's revocation key on its home shard
-- ARGV: how long (ms) the key lives (longer than any token), the Pub/Sub channel of inbox
--       changes, the recipient id
--
-- The epoch is the Redis clock in ms, or one more than the last epoch if that is later: it
-- grows with every revocation while the key lives, and after the key expired (every token of
-- an older epoch had expired by then) the clock is past any epoch a token still carries.
--
-- Reply: the new epoch.

local last = tonumber(redis.call("GET", KEYS[1]) or "0")
local epoch = math.max(last + 1, now_ms())
redis.call("SET", KEYS[1], string.format("%d", epoch), "PX", ARGV[1])
redis.call("PUBLISH", ARGV[2], "\31revoked\31" .. ARGV[3])
return epoch
