"""Delivery: the worker that hands work items to providers.

Owns the worker's lanes and lifecycle (``worker``), the readers of its lanes (``lane_reader``),
leasing what they read (``leasing``), the address of a delivery that waited for one
(``awaiting``), an escalation step not needed when it comes due (``steps``), one attempt
from rendering to the recorded outcome (``attempt``), taking over and dead-lettering what
others left (``recovery``), moving due ``delayed`` members back (``scheduler``), the retry
policy, rendering and provider time limits, what a provider's word that an address is dead
changes (``dead_addresses``), and the worker's heartbeat: its CPU share and provider waits,
for the advisor (``heartbeat``).

May import: the shared ``app`` modules, ``app.providers``, ``app.recipients`` (how the
suppression list shows an address; the address a profile gives a waiting delivery),
``streams``.
Never ``app.api``, ``app.ingest`` or Litestar.
"""
