"""Digests in Redis (``digest`` in the catalog: ``app.catalog.digests``).

- ``store``: a notification joining the digest open for its (recipient, type, key)
  (``join.lua``), a due digest sealed against further joins (``seal.lua``) and closed once
  its notification is made, and a cancelled notification leaving an open one
  (``leave.lua``);
- ``ids``: the idempotency key a digest's notification is ingested under.
"""
