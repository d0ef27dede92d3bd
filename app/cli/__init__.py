"""The ``clarion`` command (click): run the service or one part of it, send a notification,
and the operator commands (``status``, ``campaign``, ``dlq``, ``projection``), and
``services`` (private Redis and PostgreSQL for ``make run`` and ``make test``).

May import: anything in ``app``, ``projections`` and ``streams``.
"""
