"""A delivery's state: its statuses, which of them end it, and its ``dlv:<id>`` hash.

This module owns the delivery state machine; every other module, the Lua scripts included,
takes its statuses from here (``lua/shared.lua`` repeats the sets for the scripts, and
``tests/unit/test_delivery_state.py`` keeps the two equal)::

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
from enum import StrEnum
from typing import Any

from redis.asyncio import Redis

from streams.keys import ShardKeys


class DeliveryStatus(StrEnum):
    QUEUED = "QUEUED"  # in a work stream, waiting for a worker
    SCHEDULED = "SCHEDULED"  # in ``delayed``: a retry, a rate-limit wait or quiet hours
    SENDING = "SENDING"  # leased by a worker
    SENT = "SENT"  # the provider accepted it
    FAILED = "FAILED"  # given up on; its work item is in the dead-letter queue
    EXPIRED = "EXPIRED"  # its TTL passed before it could be sent
    SUPPRESSED = "SUPPRESSED"  # never to be sent: opted out, no valid address
    DELIVERED = "DELIVERED"  # the provider confirmed it arrived (provider feedback)
    READ = "READ"  # IN_APP: the recipient read the inbox message
    CANCELLED = "CANCELLED"  # its campaign was cancelled before it was sent


# Nothing is sent for a delivery in one of these any more (a replay of a FAILED one starts a
# new attempt series, by an operator's decision).
TERMINAL: frozenset[DeliveryStatus] = frozenset(
    {
        DeliveryStatus.SENT,
        DeliveryStatus.DELIVERED,
        DeliveryStatus.READ,
        DeliveryStatus.FAILED,
        DeliveryStatus.EXPIRED,
        DeliveryStatus.SUPPRESSED,
        DeliveryStatus.CANCELLED,
    }
)
# The provider took it: never sent again, not even by a replay.
PROVIDER_ACCEPTED: frozenset[DeliveryStatus] = frozenset(
    {DeliveryStatus.SENT, DeliveryStatus.DELIVERED, DeliveryStatus.READ}
)
# Ended without ever reaching a provider, for a reason a replay cannot undo.
ENDED_UNSENT: frozenset[DeliveryStatus] = frozenset(
    {DeliveryStatus.EXPIRED, DeliveryStatus.SUPPRESSED, DeliveryStatus.CANCELLED}
)


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """A delivery's ``dlv:<id>`` hash, typed. Fields the hash does not hold are empty (or 0).

    Written by ``lua/delivery_begin.lua`` (the lease), by the outcomes
    ``streams.delivery_outcomes`` builds (through ``lua/delivery_finish.lua``) and by
    ``lua/dlq_replay.lua``. Each attribute is the hash field of the same name, except
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
        fields = {_text(name): _text(value) for name, value in raw.items()}
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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
