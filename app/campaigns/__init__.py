"""Campaigns: one notification for each of many recipients, generated in the background.

A producer creates a campaign (``specs``), uploads its recipients or names a segment of
recipient profiles (``segments``), and starts it; ``lifecycle`` makes every such change,
pause, resume and cancel included. The workers run ``runner``, which leases each due
campaign to one ``generator`` at a time: it ingests the campaign's recipients in batches
through the same atomic ingest step as the API, under idempotency keys that make a second
notification for a recipient impossible, and checkpoints after each batch (what it keeps of
a batch meanwhile, its tally and its pace: ``batches``). ``progress``
tells how far a campaign has come, from its record and the read model. ``api`` holds its
HTTP routes.

May import: the shared ``app`` modules, ``app.ingest``, ``projections``, ``streams``. Only
``api`` knows HTTP (and may import ``app.api``).
"""
