"""Development tools: what ``make run`` and ``make test`` need on a machine without Redis or
PostgreSQL, never part of the product. ``python -m devtools.services exec -- COMMAND`` runs
COMMAND with private servers under ``.clarion/`` when the default ones do not answer
(``local_services``), ``python -m devtools.services down`` stops those a killed command left.
``python -m devtools.container_check`` (``make container-check``) builds the image on a local
Debian base (``container_images``) and runs it with Redis and PostgreSQL containers until the
quick start's notification is SENT.

Not shipped: the package is not in the distribution (pyproject's package list), the
container image does not copy it, and ``clarion`` and everything it runs never import it.
It runs from the repository's checkout, where ``make`` runs it.

May import: anything in ``app`` and ``streams``. Nothing in ``app``, ``streams`` or
``projections`` imports it.
"""
