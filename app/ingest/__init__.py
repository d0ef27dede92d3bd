"""Ingest: from a producer's request to the ingest script's atomic write.

Owns the request and its 202 answer (``requests``) and its fingerprint (``fingerprints``),
fan-out by the type catalog, the recipient's preferences and quiet hours (``fanout``,
``quiet_hours``, ``delivery_plan``), escalation steps and fallbacks (``chains``), the round
trips to the ingest script with their answers (``ingestor``), a request while its rounds
last (``pending``), what its trace span says of it (``span_notes``), and the routes
producers POST to (``api``).

May import: the shared ``app`` modules (``catalog``, ``metrics``, ``validation``), ``streams``.
Only ``api`` knows HTTP (and may import ``app.api``).
"""
