"""Deliveries in Redis: from a work item to its recorded outcome.

- ``work_items``: what a worker needs for one provider call;
- ``state``: a delivery's ``dlv:<id>`` hash and which statuses end it;
- ``leases``: the verdict ``begin.lua`` gives on a work item, and the leased delivery;
- ``decisions``: what is to become of a leased delivery, decided before anything is written;
- ``outcomes``: a decision turned into what ``finish.lua`` records, and
  ``outcome_records``: what every outcome records besides its change;
- ``store``: leases taken and outcomes recorded (``begin.lua``, ``finish.lua``,
  ``dead_letter_raw.lua``);
- ``delayed``: the ``delayed`` set of retries and deferrals (``schedule_due.lua``);
- ``address_waits``: deliveries waiting for the recipient's profile to give an address, and
  their release by a profile change (``await_address.lua``);
- ``fairness``: fair shares between producers within a priority (``fair_feed.lua``);
- ``circuit_breaker``, ``rate_limiter``: shared by every worker (``circuit.lua``,
  ``rate_limit.lua``);
- ``throttles``: per-recipient rate caps, counted once per delivery (``throttle.lua``);
- ``state_release``: ended deliveries' state leaves Redis once the read model has it
  (``release_states.lua``);
- ``cancellations``: a notification's pending deliveries cancelled, by its id or its
  producer's cancellation key (``cancel.lua``);
- ``early_steps``: a notification's escalation steps made due at once when it was read;
- ``parking``: ``delayed`` members due far ahead parked in PostgreSQL and put back ahead of
  their time (``promote.lua``).

``sandbox_send.lua`` is the sandbox provider's record of a call (``app.providers.sandbox``).
"""
