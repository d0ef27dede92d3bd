"""Producers' status webhooks in Redis.

- ``store``: who has one (URL and signing secret), and the figures of their outboxes;
- ``outbox``: a producer's statuses waiting to be POSTed, in order, and its dead letters
  (``outbox_append.lua``, ``dead_letter.lua``).
"""
