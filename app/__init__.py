"""Clarion's application: everything above the write model (``streams``) and the read model
(``projections``).

Sub-packages, by responsibility; each docstring says what it owns and what it may import:

- ``api``: the HTTP API (Litestar routes, schemas, auth, the dashboard);
- ``ingest``: from a producer's request to the ingest script (validation, fan-out, quiet hours);
- ``delivery``: the delivery worker (lanes, one attempt, recovery, retry policy, rendering);
- ``providers``: one adapter per provider kind;
- ``operations``: what operators ask of the system (dead-letter checks and views, status hints);
- ``cli``: the ``clarion`` command;
- ``processes``: one entry point per kind of process, their supervisor and start-up checks.

Modules at this level are shared by all of them and import no sub-package: ``settings``
(environment), ``catalog`` (``clarion.toml``), ``logging`` (structlog and masking),
``validation`` (messages naming the field), ``metrics`` (what Clarion measures),
``unsubscribe`` (the signed one-click unsubscribe links the worker makes and the API reads).

Imports flow one way: ``app → projections → streams``. Only ``api`` (and the ASGI entry point
in ``processes``) knows HTTP: domain code never imports Litestar or ``app.api``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("clarion")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
