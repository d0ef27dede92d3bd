"""Recipients in Redis.

- ``settings``: preferences, quiet hours and profile, copied to every shard
  (``settings.lua``, ``read.lua``);
- ``suppressions``: addresses never to be sent to (``suppression.lua``);
- ``erase``: forgetting a recipient: the work, dead letters and records that hold its
  addresses (``erase.lua``).
"""
