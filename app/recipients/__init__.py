"""Recipients: what Clarion keeps about the people it notifies, and what it must forget.

Owns the addresses as people give them and as the suppression list names and shows them
(``addresses``), recipient profiles, and erasure.

May import: the shared ``app`` modules, ``app.ingest`` (the request's address shapes and
validation), ``projections``, ``streams``. Never ``app.api`` or Litestar.
"""
