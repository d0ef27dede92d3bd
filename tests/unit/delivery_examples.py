"""A leased delivery to build outcomes and attempts from, without Redis."""

from __future__ import annotations

from typing import Any

import msgspec

from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, Priority
from streams.delivery.leases import Lease, LeasedDelivery, LeaseVerdict
from streams.delivery.work_items import WorkItem
from streams.dlq.entries import Worker

ITEM = WorkItem(
    delivery_id="d",
    notification_id="n",
    notification_type="otp",
    channel=Channel.SMS,
    priority=Priority.HIGH,
    recipient_id="r",
    address="+4915112345678",
    locale="en",
    created_ms=1_000,
    expires_ms=10_000_000,
)


def leased(
    *,
    version: int = 2,
    attempts: int = 1,
    first_attempt_ms: int = 4_000,
    **item_changes: Any,
) -> LeasedDelivery:
    """``ITEM`` (with ``item_changes``) leased at 5 s by worker "w": ``attempts`` made so far,
    the first at ``first_attempt_ms`` (0: none), the state at ``version``."""
    item = msgspec.structs.replace(ITEM, **item_changes)
    lease = Lease(LeaseVerdict.GO, version=version, attempts=attempts, now_ms=5_000,
                  first_attempt_ms=first_attempt_ms)  # fmt: skip
    return LeasedDelivery.taken(KeySpace("t").shard(0), item, "1-0", lease, Worker("w", "1"))
