"""Taking notifications back before they go: by id (``POST /v1/notifications/{id}/cancel``)
or by the producer's cancellation key (``POST /v1/cancellations``).

- ``service``: finds the notifications and what the read model knows of their ended
  deliveries, and cancels them (``streams.delivery.cancellations``);
- ``api``: the two endpoints.
"""
