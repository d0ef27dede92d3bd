"""A delivery's state: its statuses, which of them end it, and its ``dlv:<id>`` hash.

The statuses and their sets are words every layer shares, defined in ``streams.core.vocabulary``
(and named here too, for the modules that read states); the Lua scripts get them from there
when they load (``streams.core.scripts``). The machine they move through::

    QUEUED ─▶ SENDING ─▶ SENT ─▶ DELIVERED (provider feedback)
                           └──▶ READ (IN_APP: the recipient read it in the inbox; unread: SENT)
                │  ▲
                │  └── SCHEDULED ◀─ a transient failure or no provider quota: retried later
                ├──▶ FAILED (permanent, retries exhausted, poison; dead-lettered)
                ├──▶ EXPIRED (the notification's TTL passed first)
                └──▶ CANCELLED (its campaign was cancelled before it was sent)
    SUPPRESSED, EXPIRED or SCHEDULED (quiet hours) are also decided at ingest.

Only an operator's replay of a FAILED delivery's dead letter starts a new attempt series.

The hash is created by the first worker that touches the delivery; until then it is absent,
which means "as accepted" (the notification record says how: QUEUED, SCHEDULED, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from streams.core.codec import as_text
from streams.core.keys import ShardKeys
from streams.core.vocabulary import ENDED_UNSENT, PROVIDER_ACCEPTED, TERMINAL, DeliveryStatus

__all__ = [
    "ENDED_UNSENT",
    "PROVIDER_ACCEPTED",
    "STATE_FIELDS",
    "TERMINAL",
    "DeliveryState",
    "DeliveryStatus",
    "read_states",
]


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """A delivery's ``dlv:<id>`` hash, typed. Fields the hash does not hold are empty (or 0).

    Written by ``begin.lua`` (the lease), by the outcomes
    ``streams.delivery.outcomes`` builds (through ``finish.lua``) and by
    ``streams/dlq/replay.lua``. Each attribute is the hash field of the same name, except
    ``lease_until_ms`` (field ``lease_until``).
    """

    status: DeliveryStatus
    version: int
    attempts: int = 0
    notification_id: str = ""
    channel: str = ""
    lease_owner: str = ""
    lease_until_ms: int = 0
    first_attempt_ms: int = 0
    last_attempt_ms: int = 0
    updated_ms: int = 0
    due_ms: int = 0
    error_class: str = ""
    last_error: str = ""
    provider: str = ""
    provider_message_id: str = ""
    reason: str = ""
    # Leases taken since the last recorded outcome; past the limit the delivery is POISON.
    leases: int = 0

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> DeliveryState | None:
        """HGETALL's reply (bytes or text) as a state; None for an absent hash (or one
        without a status, which no script writes)."""
        fields = {as_text(name): as_text(value) for name, value in raw.items()}
        if not fields.get("status"):
            return None
        values: dict[str, Any] = {}
        for attribute, (field_name, kind) in _FIELDS.items():
            value = fields.get(field_name)
            if value is not None:
                values[attribute] = int(value or 0) if kind is int else value
        values["status"] = DeliveryStatus(fields["status"])
        values.setdefault("version", 1)
        return cls(**values)

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL


# attribute -> (hash field, int or str); with ``from __future__ import annotations`` a
# dataclass field's type is its annotation's text.
_FIELDS: dict[str, tuple[str, type]] = {
    field.name: (
        "lease_until" if field.name == "lease_until_ms" else field.name,
        int if field.type == "int" else str,
    )
    for field in dataclasses.fields(DeliveryState)
    if field.name != "status"
}
# Every field a state hash may hold.
STATE_FIELDS: frozenset[str] = frozenset({"status", *(name for name, _ in _FIELDS.values())})


async def read_states(
    redis: Redis, shard: ShardKeys, delivery_ids: Sequence[str]
) -> list[DeliveryState | None]:
    """The state of each delivery (None where no worker touched it yet), in one round trip."""
    if not delivery_ids:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for delivery_id in delivery_ids:
            pipe.hgetall(shard.delivery(delivery_id))
        replies: list[dict[bytes, bytes]] = await pipe.execute()
    return [DeliveryState.from_hash(raw) for raw in replies]
