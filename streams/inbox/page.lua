-- Pages of recipients' inboxes on one shard, newest first, each with its counts: one call
-- carries the pages concurrent requests asked for (``streams.core.batching``).
--
-- Keys and arguments: ``streams.inbox.pages.inbox_page_call`` lays them out.
-- KEYS: per page: the inbox hash, its order, the recipient's revocation epoch (on its home
--       shard; on any other, a key never written)
-- ARGV: per page: where to start (``+`` for the newest, else ``(<id>``: older than that
--       message), how many messages at most (0: only the counts), which ones: "inbox" (not
--       archived), "unread" (not read and not archived) or "archived", and the epoch of the
--       token asking ("": none to check, see ``streams.inbox.revocation``)
--
-- Reply: per page a list: the unread and unseen counts, then per message its id, the
-- message and its state; or only "revoked" when the token's epoch is older than the
-- recipient's. Messages are walked newest first in chunks, so a filter that skips many
-- still ends.

local function page(messages, order, start, limit, which)
  local counts = redis.call("HMGET", messages, "unread", "unseen")
  local reply = { counts[1] or "0", counts[2] or "0" }
  local found, chunk = 0, math.max(limit, 16)
  while found < limit do
    local ids = redis.call("ZREVRANGEBYLEX", order, start, "-", "LIMIT", 0, chunk)
    if #ids == 0 then
      break
    end
    local fields = {}
    for i, id in ipairs(ids) do
      fields[2 * i - 1], fields[2 * i] = "m:" .. id, "f:" .. id
    end
    local values = redis.call("HMGET", messages, unpack(fields))
    for i, id in ipairs(ids) do
      local message, state = values[2 * i - 1], values[2 * i]
      if message and state then
        local read, _, archived = inbox_state(state)
        local wanted = (which == "inbox" and archived == 0)
          or (which == "unread" and archived == 0 and read == 0)
          or (which == "archived" and archived > 0)
        if wanted and found < limit then
          found = found + 1
          reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = id, message, state
        end
      end
    end
    if #ids < chunk then
      break
    end
    start = "(" .. ids[#ids]
  end
  return reply
end

local function revoked(key, epoch)
  if epoch == "" then
    return false
  end
  local current = redis.call("GET", key)
  return current ~= false and tonumber(current) > tonumber(epoch)
end

local pages = {}
for i = 1, #KEYS / 3 do
  local k, at = 3 * (i - 1), 4 * (i - 1)
  if revoked(KEYS[k + 3], ARGV[at + 4]) then
    pages[i] = { "revoked" }
  else
    pages[i] = page(KEYS[k + 1], KEYS[k + 2], ARGV[at + 1], tonumber(ARGV[at + 2]), ARGV[at + 3])
  end
end
return pages
