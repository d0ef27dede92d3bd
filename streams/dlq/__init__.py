"""The dead-letter queue: each shard's ``dlq`` stream and its ``dlq:resolved`` marks.

- ``entries``: what an entry holds (the one place that names its fields), written by the
  delivery worker and the scheduler, read back as a ``DeadLetter``;
- ``scan``: finding entries by filter, and summarising them;
- ``replay``: an operator's controlled replay (``replay.lua``).

Entries are never deleted here: they are the audit trail. Retention trims them after
``CLARION_DLQ_RETENTION`` (``streams.core.retention``).
"""
