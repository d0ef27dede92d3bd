"""Operators' HTTP edge, mounted by ``app.api``.

- ``probes``: liveness, readiness, the projector's lag and the Prometheus metrics;
- ``dlq``: the dead-letter queue's views and its controlled replay.
"""
