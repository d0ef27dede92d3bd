"""What every feature of the write model builds on.

- ``connection``: the Redis client (asyncio, commands packed in C);
- ``scripts``: every Lua script, loaded once and called by SHA, each after ``shared.lua``
  and the vocabulary written out for Lua;
- ``keys``: every Redis key name (``grouped_keys``: those sharing a hash tag of their own);
  ``ids``: time-ordered ids that carry their shard;
- ``events``: the event contract (``event_base``: its base and reasons; ``campaign_events``:
  campaigns'); ``codec``: events and work items to bytes and back;
  ``records``: the notification record;
- ``vocabulary``: channels, priorities, delivery statuses, campaign states as ``StrEnum``;
- ``clock``: the wall clock in milliseconds; ``errors``: the ``ClarionError`` hierarchy;
- ``batching``: many small script calls from concurrent tasks merged into few;
- ``consumer_groups``: the groups Clarion reads its streams with;
- ``leases``: one holder at a time for a role (``lease.lua``);
- ``retention``: trimming streams once every group has read them (``trim_stream.lua``).
"""
