"""The read model in PostgreSQL: its schema, the rows events write, and what is read.

- ``database``: create the database, apply the numbered ``migrations``, open a pool;
- ``partitions``: daily partitions of the growing tables, created ahead and dropped by
  retention;
- ``projector``: every shard's ``events`` stream materialised, a batch per transaction;
  ``rows`` (notifications and deliveries), ``delivery_changes`` (what each event changes
  in a delivery's row), ``inbox_rows`` (the inbox's history) and ``digest_rows`` (digests
  and who joined them) are what it writes;
- ``rebuild``: the read model made again from the event history, into the fresh tables
  ``rebuild_schema`` makes like the live ones;
- ``queries``: what the status API reads, and how far behind the read model is;
- ``recipient_log``: a recipient's message log, every producer's deliveries to it;
- ``campaign_queries``: a campaign's deliveries counted by status;
- ``dashboard``: what the dashboard's pages and charts read;
- ``parking``: work items due far ahead kept here instead of in Redis, put back ahead of
  their time (run by the projector process).

Imports ``streams`` only.
"""
