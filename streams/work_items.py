"""A delivery work item: everything a worker needs to make one provider call.

Work items sit in ``work:<priority>`` streams and in the ``delayed`` set. Unlike events they
carry the address and the template data, and they live only until the delivery ends. They
are encoded as JSON arrays (field order, no names): a third smaller and faster to write and
read. So a new field may only be appended at the end, with a default.
"""

from __future__ import annotations

from typing import Any

import msgspec

from streams.vocabulary import Channel, Priority


class WorkItem(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
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
