"""Providers: one adapter module per provider kind, behind one ``Provider`` protocol (``base``).

Owns how a message is handed to a provider and how its answers map to error classes.
``registry`` builds the adapters a catalog names. The ``smtp`` adapter keeps the email it
builds in ``smtp_message`` and what a relay's answers mean in ``smtp_answers``; each
HTTP/2 connection (``http2_connection``) runs ``h2`` as ``http2_machine`` configures it.

May import: the shared ``app`` modules, ``streams``. Never ``app.api``, ``app.delivery`` or
``app.ingest``.
"""
