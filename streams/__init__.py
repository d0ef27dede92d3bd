"""The write model on Redis: the event contract, how it is encoded and keyed, and every
atomic change to it (Lua scripts beside their Python callers).

Owns: the vocabulary (``vocabulary``), events (``events``, ``codec``), key names (``keys``),
ids, the delivery state machine (``delivery_state``, ``delivery_leases``,
``delivery_decisions``, ``delivery_outcomes``, ``delivery_store``), ingest's write
(``ingest``), consumer groups, the ``delayed`` set (``scheduler``), rate limits, recipient
settings, the dead-letter queue (``dlq``), stream retention, the backlog's figures, the
metrics recorder, producers' status webhooks and their outboxes (``status_webhooks``,
``status_outbox``), leases, one wall clock (``clock``), and the one error hierarchy every
layer raises (``errors``: kinds of error, no HTTP).

Imports nothing local: ``projections`` and ``app`` build on it, never the other way round.
"""
