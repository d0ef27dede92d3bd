"""A delivery work item: everything a worker needs to make one provider call.

Work items sit in ``work:<priority>`` streams and in the ``delayed`` set. Unlike events they
carry the address and, unless it is shared, the template data; they live only until the
delivery ends (the finish script deletes a work entry with its acknowledgement). They are
encoded as JSON arrays (field order, no names): a third smaller and faster to write and
read. So a new field may only be appended at the end, with a default: after ``trace``, in
``WorkItem`` (an item written by an earlier version must still decode field by field).

A notification's template data travels in each of its work items while it is small. When
copies would cost more than a key of its own (``DATA_KEY_OVERHEAD``), ingest writes the data
once, in the notification's ``data:<id>`` hash (``ShardKeys.data``), and each item says so
with ``shared_data``: the worker's lease reads it from there, and the last of the
notification's deliveries to end deletes it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from streams.core.vocabulary import Channel, Priority

# About what a small hash key of its own costs Redis (key, entry, expiry, listpack), in
# bytes: data is shared once its extra copies would cost more than that.
DATA_KEY_OVERHEAD = 200


class UntracedWorkItem(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """A work item's fields but its trace: what ingest encodes for an item without one
    (tracing off), byte for byte as before items carried traces, at no cost. msgspec writes
    every field of an array-like struct, trailing defaults too, so a ``WorkItem`` with an
    empty trace would end in ``,""``; decoders read both as a ``WorkItem``."""

    delivery_id: str
    notification_id: str
    notification_type: str
    channel: Channel
    priority: Priority
    recipient_id: str
    address: str
    locale: str
    data: dict[str, Any] = {}
    created_ms: int
    expires_ms: int
    # Attempts already made before this item was (re)queued.
    attempts: int = 0
    # The producer that sent the notification (whose dead letters these are).
    producer: str = ""
    # The template data is in the notification's ``data:<id>`` hash, not in ``data``.
    shared_data: bool = False
    # How many times an attempt failed over: the channel's provider list is tried from
    # this position on (``app.delivery.routing``).
    failover: int = 0
    # The campaign whose notification this is ("" for none; ``streams.campaigns.ids``): the
    # worker checks, before a send, that it was not cancelled.
    campaign: str = ""


class WorkItem(UntracedWorkItem, frozen=True, kw_only=True, array_like=True):
    """A delivery's work item, as workers read it (``UntracedWorkItem`` says why two)."""

    # The W3C ``traceparent`` of the request that made it ("" when tracing is off): each
    # attempt's span joins that trace (``app.tracing``). Kept through retries, deferrals and
    # dead-letter replays, which re-queue the item as it is (``codec.encode_work_item``).
    trace: str = ""
    # Until when (ms) a delivery without an address waits for the recipient's profile to give
    # one (0: it does not wait; ``streams.delivery.address_waits``). Only such an item has it.
    await_until_ms: int = 0
    # When the producer asked it to go (ms; 0: at once): a delivery sent later
    # (``send_at``/``delay``) is looked at again when it comes due, against the recipient's
    # preferences and quiet hours as they are then (``app.delivery.awaiting``).
    send_at_ms: int = 0
    # An escalation step (``app.catalog.steps``): its number in the chain (0: none), the
    # conditions that skip it when it comes due ("read", "delivered") and the earlier steps'
    # deliveries they look at.
    step: int = 0
    unless: list[str] = []
    watch: list[str] = []
    # Later steps look at this delivery's state: it is kept (``held``) after it ends.
    watched: bool = False
    # Made on a permanent failure (``fallback`` in the catalog): the id, channel and address
    # ("": the recipient's profile gives it) of the delivery that replaces this one.
    fallback: list[str] = []


def share_data(encoded_data_size: int, work_items: int) -> bool:
    """Whether a notification's data goes into a key of its own instead of every item."""
    return (work_items - 1) * encoded_data_size > DATA_KEY_OVERHEAD
