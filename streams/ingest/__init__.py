"""Accepting notifications in Redis.

- ``writer``: one atomic step per notification (``ingest.lua``): the idempotency record,
  the notification record, its events and its deliveries' work;
- ``quota``: producers' ingest quotas, shared by every API process (``quota.lua``).
"""
