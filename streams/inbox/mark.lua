-- Record what a recipient did with inbox messages of one shard: each message's new state,
-- the counts, the delivery's state and event, the feed entry and its publication, in one
-- atomic step.
--
-- Keys and arguments: ``streams.inbox.marks.inbox_mark_call`` lays them out.
-- KEYS: the inbox hash, its feed, the shard's events, then per change the delivery's state
--       hash
-- ARGV: the feed's length, how long (ms) it lives after its newest change, the Pub/Sub
--       channel, the recipient, then per change: the
--       message id, the kind (read, unread, seen, archived, unarchived), the state the
--       caller read, the new state, the change of the unread and of the unseen count, the
--       delivery's version the caller read ("" when it found no state hash), the status
--       after it and the encoded event
--
-- Reply per change: "OK"; "MOVED" when the message's state or the delivery's version is no
-- longer what the caller read (nothing recorded: read again); "GONE" when the message has
-- left the inbox.

local messages, feed, events = KEYS[1], KEYS[2], KEYS[3]
local feed_length, feed_ttl_ms, live, recipient = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local next_arg = arguments(5)

local replies = {}
for i = 4, #KEYS do
  local state_key = KEYS[i]
  local id, kind, expected, new = next_arg(), next_arg(), next_arg(), next_arg()
  local unread, unseen = next_arg(), next_arg()
  local version, status, event = next_arg(), next_arg(), next_arg()
  local current = redis.call("HGET", messages, "f:" .. id)
  local found = redis.call("HGET", state_key, "version")
  local reply = "OK"
  if not current then
    reply = "GONE"
  elseif current ~= expected or (found or "") ~= version then
    reply = "MOVED"
  else
    redis.call("HSET", messages, "f:" .. id, new)
    redis.call("HINCRBY", messages, "unread", unread)
    redis.call("HINCRBY", messages, "unseen", unseen)
    if found then
      local _, _, _, after = inbox_state(new)
      redis.call("HSET", state_key, "status", status, "version", after)
    end
    redis.call("XADD", events, "*", "e", event)
    inbox_feed(messages, feed, { feed_length, feed_ttl_ms }, live, recipient, kind, id, new)
  end
  replies[#replies + 1] = reply
end
return replies
