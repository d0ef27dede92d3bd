"""The ``clarion`` command (click): run the service or one part of it, send a notification,
and the operator commands (``status``, ``campaign``, ``dlq``, ``projection``). (The
private Redis and PostgreSQL of ``make run`` and ``make test`` are ``devtools.services``,
which is no part of the product.)

May import: anything in ``app``, ``projections`` and ``streams``.
"""
