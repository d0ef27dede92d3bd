"""The write model on Redis: the event contract, how it is encoded and keyed, and every
atomic change to it, by feature. Each sub-package holds its Python and, beside it, the Lua
scripts it calls (registered in ``core.scripts``).

Sub-packages:

- ``core``: what every feature builds on: the Redis connection, the script loader, key
  names, the events and their codec, ids, the vocabulary (``StrEnum`` types), one clock, the
  error hierarchy, consumer groups, role leases and stream retention;
- ``ingest``: writing accepted notifications (one atomic step each) and producers' quotas;
- ``delivery``: a delivery's state, its lease, what an attempt decided and how that is
  recorded, the ``delayed`` set, fairness between producers, circuits and rate limits;
- ``inbox``: recipients' inboxes, their live feeds and their tokens' revocation;
- ``campaigns``: campaign records and the keys their notifications are ingested under;
- ``digests``: digests joined, sealed, closed and left, and their notifications' keys;
- ``dlq``: the dead-letter queue, its scans and its controlled replay;
- ``feedback``: providers' verified callbacks and what they change;
- ``recipients``: a recipient's settings, the suppression list, and erasure;
- ``status_webhooks``: producers' status webhooks and their outboxes;
- ``metrics``: the counters every process adds to, and the backlog's figures.

Imports nothing local: ``projections`` and ``app`` build on it, never the other way round.
A feature package imports ``core`` and, where it must, another feature's store.
"""
