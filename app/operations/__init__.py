"""Operations: what an operator asks of a running Clarion, shared by the API and the CLI.

Owns the dead-letter queue's filters, checks and views (``dlq``) and the status figures with
their runbook hints (``status_hints``).

May import: the shared ``app`` modules, ``app.ingest`` (the quiet-hours rule a replay
applies), ``projections``, ``streams``. Never ``app.api`` or Litestar.
"""
