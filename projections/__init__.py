"""The read model in PostgreSQL: its schema (numbered migrations), the rows events write
(``rows``), the projector that writes them (``projector``), the queries the status API and
the dashboard read, daily history partitions, and rebuilding it all from the history.

Imports ``streams`` only.
"""
