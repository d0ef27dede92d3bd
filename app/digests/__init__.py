"""Digests: many notifications to one person, sent as one (``digest`` in the catalog).

- ``closer``: in every worker process, closes due digests into their notifications.

Joining happens at ingest (``app.ingest.digests``); the digests themselves live in Redis
(``streams.digests``).

May import: the shared ``app`` modules, ``app.ingest`` (a digest's notification is ingested
like any other), ``streams``.
"""
