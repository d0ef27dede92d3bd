"""The inbox's HTTP edge, mounted by ``app.api``.

- ``routes``: reading and changing an inbox, and making tokens;
- ``stream``: the realtime stream (server-sent events);
- ``cors``: which origins a browser may call from;
- ``demo``: the demo page and its script (``static/``).

Like ``app.api``, it may import Litestar; nothing outside an ``api`` package may.
"""
