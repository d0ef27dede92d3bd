"""Recipients in Redis.

- ``settings``: preferences, quiet hours and profile, changed on the home shard and copied
  to every other (``settings.lua``);
- ``read``: the settings as a shard holds them, many recipients' read at once (``read.lua``);
- ``suppressions``: addresses never to be sent to (``suppression.lua``);
- ``erase``: forgetting a recipient: the work, dead letters and records that hold its
  addresses (``erase.lua``).
"""
