"""The HTTP API: Litestar routes, request and answer schemas, API keys, the FAILED dashboard.

Owns everything HTTP: status codes (the domain's errors get theirs in ``errors``), headers,
OpenAPI documentation, HTML. Handlers are thin: they check the caller and the input, then
call ``ingest``, ``operations``, ``projections`` or ``streams``.

May import: every ``app`` package except ``cli`` and ``processes``; ``projections``;
``streams``.
"""
