"""Clarion's application: everything above the write model (``streams``) and the read model
(``projections``).

Sub-packages, one per feature; each docstring says what it owns and what it may import:

- ``api``: the HTTP API's edge (the Litestar app, auth, bodies, errors, schemas, the
  dashboard) and the routes of features without a package of their own;
- ``ingest``: from a producer's request to the ingest script (validation, fan-out, quiet hours);
- ``delivery``: the delivery worker (lanes, one attempt, recovery, retry policy, rendering);
- ``providers``: one adapter per provider kind;
- ``inbox``: the in-app inbox (its tokens, its provider, its routes and realtime stream);
- ``campaigns``: one notification for each of many recipients, generated in the background;
- ``cancellations``: notifications taken back before they go (by id or cancellation key);
- ``digests``: due digests closed into the one notification each is sent as;
- ``recipients``: recipients' profiles, addresses and erasure;
- ``feedback``: providers' callbacks (bounces, complaints, receipts) and what they change;
- ``status_webhooks``: producers' status webhooks (who gets what, sending, dead letters);
- ``operations``: what operators ask of the system (dead-letter checks and views, status hints);
- ``catalog``: ``clarion.toml``, the types, channels and providers;
- ``cli``: the ``clarion`` command;
- ``processes``: one entry point per kind of process, their supervisor and start-up checks.

Modules at this level are shared by all of them and import no sub-package but ``catalog``
and the inbox's ``tokens``: ``settings`` (environment), ``setting_values`` (one variable's
text checked and made a setting's value), ``logging`` (structlog and masking),
``validation`` (messages naming the field), ``metrics`` (what Clarion measures),
``tracing`` (OpenTelemetry), ``signed_tokens`` (sealed tokens), ``unsubscribe`` (the signed
one-click unsubscribe links the worker makes and the API reads).

Imports flow one way: ``app → projections → streams``. Only what is named ``api`` (``app.api``,
a feature's ``api``, and the ASGI entry point ``processes.api``) knows HTTP: domain code never
imports Litestar.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("clarion")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
