"""Delivery: the worker that hands work items to providers.

Owns the worker's lanes and lifecycle (``worker``), one attempt from rendering to the recorded
outcome (``attempt``), taking over and dead-lettering what others left (``recovery``), moving
due ``delayed`` members back (``scheduler``), the retry policy, rendering and provider time
limits.

May import: the shared ``app`` modules, ``app.providers``, ``streams``.
Never ``app.api``, ``app.ingest`` or Litestar.
"""
