-- Read the settings of many recipients of one shard at once.
--
-- One reply for a whole batch: the client parses it in one go, where a pipeline of HGETALLs
-- costs the Python client about 20 µs per reply.
--
-- Keys and arguments: ``streams.recipients.read.recipients_read_call`` lays them out.
-- KEYS: the recipients' settings hashes
-- ARGV: none
--
-- Reply: per key, its fields and values as HGETALL gives them (an empty list for none).

local replies = {}
for i, key in ipairs(KEYS) do
  replies[i] = redis.call("HGETALL", key)
end
return replies
