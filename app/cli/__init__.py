"""The ``clarion`` command (click): run the service or one part of it, send a notification,
and the operator commands (``status``, ``campaign``, ``dlq``, ``projection``).

May import: anything in ``app``, ``projections`` and ``streams``.
"""
