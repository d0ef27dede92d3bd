"""Status webhooks: every delivery's final status and every feedback change, POSTed to the
producer's own URL, signed as Standard Webhooks.

Owns which events are due and what their JSON says (``payloads``), whose delivery an event
is about (``owners``), reading every shard's ``events`` into per-producer outboxes
(``dispatcher``), one producer's URL (``endpoint``: the SSRF guard, signing, what an answer
means), sending one producer's outbox in order with retries and dead letters (``sender``),
the process's single active instance with its senders (``service``), and the routes a
producer configures its webhook with (``api``).

May import: the shared ``app`` modules, ``app.providers`` (the webhook signature, the SSRF
guard and the HTTP client), ``projections`` (the read model, to find a delivery's producer
once Redis has forgotten it), ``streams``. Never ``app.delivery``; only ``api`` knows HTTP
(and may import ``app.api``).
"""
