"""Campaigns in Redis.

- ``store``: each campaign's record, its audience in chunks, and every change to it as one
  compare-and-set with its event (``write.lua``);
- ``ids``: the idempotency key each of a campaign's notifications is ingested under.
"""
