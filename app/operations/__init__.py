"""Operations: what an operator asks of a running Clarion, shared by the API and the CLI.

Owns the dead-letter queue's filters, checks and views (``dlq``); the advisor's decision tree
(``advisor``), its signals gathered from a metrics snapshot and its views (``advice``); the
figures ``clarion status`` prints with the advisor's hints (``status_hints``); whether the
process may serve (``readiness``);
and its HTTP routes (``api``: probes, metrics, the dead-letter views and replay).

May import: the shared ``app`` modules, ``app.ingest`` (the quiet-hours rule a replay
applies), ``projections``, ``streams``. Only ``api`` knows HTTP (and may import ``app.api``).
"""
