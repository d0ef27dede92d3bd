"""What every outcome records besides its own change (``streams.delivery.outcomes`` makes
the changes): the end of the lease, the change's time and version, a scheduled delivery's
``DeliveryDue`` first, the state kept for later steps, the shared data released by the
last delivery to end; and the ids, times and versions its events carry.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypedDict

from streams.core import codec
from streams.core.events import DeliveryDue, Event
from streams.core.scripts import KeyOrArg
from streams.delivery.leases import LeasedDelivery
from streams.delivery.state import TERMINAL
from streams.delivery.store import Outcome


def recorded(
    leased: LeasedDelivery,
    events: list[Event],
    fields: dict[str, KeyOrArg],
    *,
    now_ms: int,
    delayed: tuple[bytes, int] | None = None,
    dead_letter: dict[str, KeyOrArg] | None = None,
    others: list[Event] | None = None,
) -> Outcome:
    # Every outcome ends the lease (and the count of leases without one) and stamps the change.
    ends = fields["status"] in TERMINAL
    fields = {**fields, "lease_owner": "", "lease_until": 0, "leases": 0, "updated_ms": now_ms}
    item = leased.item
    if ends and item.watched:
        # Later steps look at this state when they come due: not released once projected.
        fields["held"] = 1
    if leased.came_due:
        # A scheduled delivery taken up at its time: that comes first, then what became of it.
        due = DeliveryDue(
            **ids(leased, 0, now_ms), channel=item.channel, scheduled_for=at(item.send_at_ms)
        )
        events = [due, *events]
    fields["version"] = leased.lease.version + len(events)
    if others:  # the first events of deliveries this outcome makes (a fallback)
        events = [*events, *others]
    member, due_ms = delayed or (b"", 0)
    return about(
        leased,
        events=codec.encode_events(events) if events else b"",
        fields=fields,
        delayed_member=member,
        due_ms=due_ms,
        dead_letter=dead_letter or {},
        releases_data=leased.shard.data(item.notification_id) if ends and item.shared_data else "",
    )


def about(leased: LeasedDelivery, **recorded: Any) -> Outcome:
    """An outcome of ``leased``'s delivery, acknowledging its work entry."""
    return Outcome(
        shard=leased.shard,
        priority=leased.priority,
        delivery_id=leased.item.delivery_id,
        entry_id=leased.entry_id,
        expected_version=leased.lease.version,
        **recorded,
    )


class Ids(TypedDict):
    at: datetime
    notification_id: str
    delivery_id: str
    version: int


def ids(leased: LeasedDelivery, offset: int, now_ms: int) -> Ids:
    """The fields every event about this delivery has; ``offset`` numbers the change."""
    return Ids(
        at=at(now_ms),
        notification_id=leased.item.notification_id,
        delivery_id=leased.item.delivery_id,
        version=version(leased) + offset,
    )


def version(leased: LeasedDelivery) -> int:
    """The version the outcome's own events count from: the lease's, or one more when the
    outcome first records that a scheduled delivery came due (``DeliveryDue``)."""
    return leased.lease.version + leased.came_due


def attempt_times(leased: LeasedDelivery, now_ms: int) -> dict[str, KeyOrArg]:
    return {"first_attempt_ms": leased.lease.first_attempt_ms or now_ms, "last_attempt_ms": now_ms}


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
