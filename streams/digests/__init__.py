"""Digests in Redis (``digest`` in the catalog: ``app.catalog.digests``).

- ``store``: a notification joining the digest open for its (recipient, type, key)
  (``join.lua``), and a cancelled notification leaving an open one (``leave.lua``);
- ``closing``: due digests taken by one closer (``take.lua``), sealed against further joins
  and read (``seal.lua``), and closed once their notifications are made (``close.lua``);
- ``ids``: the idempotency key a digest's notification is ingested under.
"""
