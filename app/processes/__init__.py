"""Clarion's processes: one entry point per kind (the API's ASGI factory, the delivery
worker, the projector), the supervisor that runs them together, and their start-up checks.

Owns settings from the environment turned into running objects, signals and shutdown.

May import: ``app.api``, ``app.delivery``, ``app.providers``, the shared ``app`` modules,
``projections``, ``streams``. Never ``app.cli``.
"""
