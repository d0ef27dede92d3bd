"""A delivery's lease: the verdict ``DeliveryStore.begin`` (``begin.lua``) gives
on each work item, what it found, and the delivery a worker then holds.

The verdicts travel as the script's plain words; ``LeaseVerdict`` names them on this side.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

from streams.core.keys import ShardKeys
from streams.core.vocabulary import Priority
from streams.delivery.work_items import WorkItem
from streams.dlq.entries import Worker


class LeaseVerdict(StrEnum):
    """What ``begin`` decided for one work item."""

    GO = "GO"  # the lease is ours: send it
    # The lease is ours, but the delivery was leased more often than allowed without an
    # outcome: fail it, do not send it.
    POISON = "POISON"
    CANCELLED = "CANCELLED"  # the lease is ours, but its campaign was cancelled: end it so
    TERMINAL = "TERMINAL"  # the delivery ended already: drop the work item
    LEASED = "LEASED"  # another live lease holds it: leave the item for later


# The verdicts of work items that are not sent, though their outcome is recorded now.
UNSENT: frozenset[LeaseVerdict] = frozenset(
    {LeaseVerdict.TERMINAL, LeaseVerdict.CANCELLED, LeaseVerdict.POISON}
)
# Each verdict as the script answers it.
VERDICT_OF_REPLY: dict[bytes, LeaseVerdict] = {
    verdict.value.encode(): verdict for verdict in LeaseVerdict
}
# The value a cancel marker had before it named who cancelled.
_UNNAMED_CANCELLER = b"1"


def lease_of_reply(values: tuple[bytes, ...]) -> Lease:
    """One item's six values of ``begin.lua``'s reply as a lease: verdict, version, attempts,
    now, first attempt, then the shared data, or for CANCELLED the campaign's cancel marker
    (who cancelled it)."""
    verdict, version, attempts, now, first, data = values
    said = VERDICT_OF_REPLY[verdict]
    if said is LeaseVerdict.CANCELLED:
        by = "" if data == _UNNAMED_CANCELLER else data.decode(errors="replace")
        return Lease(said, int(version), int(attempts), int(now), int(first), cancelled_by=by)
    return Lease(said, int(version), int(attempts), int(now), int(first), data)


# Lease and LeasedDelivery are made once per delivery: as frozen msgspec Structs they cost a
# tenth of what frozen dataclasses do (no object.__setattr__ call per field).
class Lease(msgspec.Struct, frozen=True):
    """What ``begin`` found for one delivery."""

    verdict: LeaseVerdict
    version: int
    attempts: int
    now_ms: int
    first_attempt_ms: int
    # The notification's shared template data, encoded, for a GO or POISON lease of an item
    # with ``shared_data`` (b"" when it has none, or when it is gone, or for any other
    # verdict).
    shared_data: bytes = b""
    # For a CANCELLED lease: who cancelled the campaign, as its cancel marker says (the
    # producer; "" when the marker predates that record).
    cancelled_by: str = ""


_data_decoder = msgspec.json.Decoder(dict[str, Any])


class LeasedDelivery(msgspec.Struct, frozen=True):
    """A delivery a worker holds: its work item, where the item came from, what the lease
    found, the worker, and the template data (the item's own, or the notification's shared
    data that the lease read; None when shared data is gone)."""

    shard: ShardKeys
    item: WorkItem
    entry_id: str
    lease: Lease
    worker: Worker
    data: dict[str, Any] | None
    # A scheduled delivery (``send_at``/``delay``) leased for the first time: its outcome
    # records first that it came due (``DeliveryDue``).
    came_due: bool = False

    @classmethod
    def taken(
        cls, shard: ShardKeys, item: WorkItem, entry_id: str, lease: Lease, worker: Worker
    ) -> LeasedDelivery:
        """The delivery ``lease`` holds, with its template data resolved."""
        data: dict[str, Any] | None = item.data
        if item.shared_data:
            data = _data_decoder.decode(lease.shared_data) if lease.shared_data else None
        return cls(shard, item, entry_id, lease, worker, data)

    @property
    def priority(self) -> Priority:
        return self.item.priority

    def self_contained_item(self) -> WorkItem:
        """The work item with its template data inside: what a dead letter keeps, so a replay
        never depends on the notification's shared data, which ends with its deliveries."""
        if not self.item.shared_data:
            return self.item
        return msgspec.structs.replace(self.item, data=self.data or {}, shared_data=False)
