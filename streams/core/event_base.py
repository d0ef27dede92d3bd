"""The base of every event and the words events use for reasons (``streams.core.events``
has the events themselves and the rules that keep stored ones readable).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

# Why a delivery is never sent. The first four are decided by fan-out; the next ones are the
# reasons an address is on the suppression list (``AddressSuppressed``; "stop": the recipient
# texted STOP); "erased": the recipient was erased while the delivery waited; "throttled": the
# recipient had its type's (or the default) cap of deliveries in the window already.
SuppressReason = Literal[
    "no_address", "opted_out", "invalid_address", "no_provider",
    "hard_bounce", "complaint", "unsubscribed", "invalid_token", "stop",
    "erased", "throttled",
]  # fmt: skip
# Why an address is on the suppression list ("invalid_address": a provider said a phone number
# or URL is dead; "invalid_token": the same of a push target).
SuppressionReason = Literal[
    "hard_bounce", "complaint", "unsubscribed", "invalid_token", "invalid_address", "stop"
]
# What makes an escalation step unneeded when it comes due: an earlier step's delivery was
# read (IN_APP), or confirmed delivered by provider feedback (or read).
StepCondition = Literal["read", "delivered"]
# Why a delivery waits ("awaiting_address": its type waits for the recipient's profile to give
# an address, ``await_address_seconds`` in the catalog; "throttled": it waits until the
# recipient's throttle window allows it).
DeferReason = Literal[
    "quiet_hours", "rate_limited", "circuit_open", "bulkhead_full", "no_provider",
    "awaiting_address", "throttled",
]  # fmt: skip


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event: when it happened."""

    at: datetime


class DeliveryEvent(Event, frozen=True, kw_only=True):
    """Base of events about one delivery."""

    notification_id: str
    delivery_id: str
    version: int
