"""What Clarion measures, kept in Redis so that every process adds to one figure.

- ``recorder``: the counters and histograms every process adds to;
- ``backlog``: how much work waits in each stream and group, and for how long, read live;
- ``retries``: the retries waiting in ``delayed``, per priority, read live;
- ``heartbeats``: what each delivery worker last reported (CPU share, provider waits).
"""
