"""Recipients: what Clarion keeps about the people it notifies, and what it must forget.

Owns the addresses as people give them and as the suppression list names and shows them
(``addresses``), recipient profiles, what a delivery that waited for an address finds in
them (``awaiting``), erasure, and their HTTP routes (``api``).

May import: the shared ``app`` modules, ``app.ingest`` (the request's address shapes and
validation), ``projections``, ``streams``. Only ``api`` knows HTTP (and may import
``app.api``).
"""
