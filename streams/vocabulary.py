"""The words every layer shares: channels, priorities and error classes, each defined once.

Each is a ``StrEnum`` whose members are the very strings that events, work items, Redis
hashes, SQL rows and the HTTP API carry, so entries written before stay readable and a member
compares equal to its text.
"""

from __future__ import annotations

from enum import StrEnum


class Channel(StrEnum):
    """Where a delivery goes."""

    PUSH = "PUSH"
    EMAIL = "EMAIL"
    SMS = "SMS"
    IN_APP = "IN_APP"
    WEBHOOK = "WEBHOOK"  # a signed POST to a URL (a chat tool, a customer's endpoint)


class Priority(StrEnum):
    """A notification's priority: each has its own work stream and worker lane, and HIGH has
    provider quota the others may not use."""

    HIGH = "HIGH"
    NORMAL = "NORMAL"
    LOW = "LOW"

    def __init__(self, value: str) -> None:
        # Derived once per member, not per use: ingest asks for them per delivery.
        # ``high``, ``normal`` or ``low``: how key names and Lua scripts name this
        # priority's work stream (``work:high``), and the prefix of its ``delayed`` members.
        self.stream_name = value.lower()
        # ``H``, ``N`` or ``L``: this priority in the rate-limit script's arguments (one
        # character per request keeps a batch's arguments to one short string).
        self.letter = value[0]


class ErrorClass(StrEnum):
    """Why an attempt failed, which decides what happens next."""

    TRANSIENT = "TRANSIENT"  # timeouts, 5xx, 429: retried with backoff
    PERMANENT = "PERMANENT"  # invalid address, unsubscribed, invalid token: failed at once
    POISON = "POISON"  # undecodable work item, or delivered too often
    BUG = "BUG"  # an unexpected exception in Clarion or an adapter


CHANNELS: tuple[Channel, ...] = tuple(Channel)
PRIORITIES: tuple[Priority, ...] = tuple(Priority)
ERROR_CLASSES: tuple[ErrorClass, ...] = tuple(ErrorClass)
