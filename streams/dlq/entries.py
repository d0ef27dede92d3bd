"""What a dead-letter entry holds: the fields each kind is written with, and how it is read.

Each shard's ``dlq`` stream holds three kinds of entries:

- a FAILED delivery (``failed_delivery_entry``, recorded by ``streams/delivery/finish.lua``):
  ids, type, channel, priority, producer, error class, last error, attempts and their times,
  worker, the delivery's version and its work item (with its template data inside);
- a POISON work entry nobody can handle (``poison_entry``,
  ``streams/delivery/dead_letter_raw.lua``): the reason and the entry's raw fields, each
  named ``raw_<field>`` (``raw_w`` is the work item,
  when it can be read at all);
- an unreadable ``delayed`` member (``streams/delivery/schedule_due.lua``): a ``reason`` and
  the member.

An operator's replay records how it settled an entry in the shard's ``dlq:resolved`` hash
(entry id → JSON with the outcome, operator, reason and time). Work items carry the
recipient's address and template data: a ``DeadLetter`` keeps its work item for a replay,
and whoever shows an entry must leave both out (``app.operations.dlq``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgspec

from streams.core import codec
from streams.core.vocabulary import ErrorClass
from streams.delivery.work_items import WorkItem

KeyOrArg = str | bytes | int | float
RAW_PREFIX = "raw_"  # a poison entry's copy of each field of the work entry


@dataclass(frozen=True, slots=True)
class Resolution:
    """How a replay settled an entry."""

    outcome: str
    operator: str
    reason: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One ``dlq`` entry, parsed. Fields an entry does not carry are empty (or 0)."""

    shard: int
    entry_id: str
    error_class: str  # POISON for entries written without one
    last_error: str
    delivery_id: str = ""
    notification_id: str = ""
    notification_type: str = ""
    channel: str = ""
    priority: str = ""
    producer: str = ""  # "" when the entry does not say (an unreadable work entry)
    attempts: int = 0
    first_attempt_ms: int = 0
    last_attempt_ms: int = 0
    worker: str = ""
    worker_version: str = ""
    version: int | None = None  # the delivery's version when it was dead-lettered
    work_entry_id: str = ""
    work: WorkItem | None = None  # None when the entry holds no readable work item
    other_fields: tuple[str, ...] = ()  # names only: raw values may hold an address
    resolution: Resolution | None = None

    @property
    def dead_lettered_ms(self) -> int:
        return int(self.entry_id.partition("-")[0])


@dataclass(frozen=True, slots=True)
class Worker:
    """The worker process that dead-letters something: its consumer name and version."""

    name: str
    version: str


def failed_delivery_entry(
    item: WorkItem,
    *,
    error_class: ErrorClass,
    error: str,
    attempts: int,
    first_attempt_ms: int,
    last_attempt_ms: int,
    worker: Worker,
    version: int,
    work_entry_id: str,
) -> dict[str, KeyOrArg]:
    """The fields of a FAILED delivery's entry; ``version`` is the one its failure left."""
    return {
        "delivery_id": item.delivery_id,
        "notification_id": item.notification_id,
        "type": item.notification_type,
        "channel": item.channel,
        "priority": item.priority,
        "producer": item.producer,
        "error_class": error_class,
        "last_error": error,
        "attempts": attempts,
        "first_attempt_ms": first_attempt_ms,
        "last_attempt_ms": last_attempt_ms,
        "worker": worker.name,
        "worker_version": worker.version,
        "version": version,
        "work_entry_id": work_entry_id,
        "work": codec.encode_work_item(item),
    }


def poison_entry(
    work_entry_id: str, raw: dict[bytes, bytes], *, reason: str, worker: Worker
) -> dict[str, KeyOrArg]:
    """The fields of a POISON entry: why, and the work entry's own fields as they were."""
    fields: dict[str, KeyOrArg] = {
        "error_class": ErrorClass.POISON,
        "last_error": reason,
        "work_entry_id": work_entry_id,
        "worker": worker.name,
        "worker_version": worker.version,
    }
    for name, value in raw.items():
        fields[RAW_PREFIX + name.decode(errors="replace")] = value
    return fields


_KNOWN = frozenset(
    {
        "delivery_id",
        "notification_id",
        "type",
        "channel",
        "priority",
        "producer",
        "error_class",
        "last_error",
        "reason",
        "attempts",
        "first_attempt_ms",
        "last_attempt_ms",
        "worker",
        "worker_version",
        "version",
        "work_entry_id",
        "work",
        RAW_PREFIX + codec.WORK_FIELD,
    }
)


def parse_entry(shard: int, entry_id: str, raw: dict[bytes, bytes]) -> DeadLetter:
    """A ``dlq`` entry's fields as a ``DeadLetter`` (without its resolution)."""
    fields = {name.decode(errors="replace"): value for name, value in raw.items()}

    def text(name: str) -> str:
        value = fields.get(name)
        return value.decode(errors="replace") if value is not None else ""

    def number(name: str) -> int:
        value = text(name)
        return int(value) if value.isdigit() else 0

    work = _work_item(fields.get("work") or fields.get(RAW_PREFIX + codec.WORK_FIELD))
    version = text("version")
    return DeadLetter(
        shard=shard,
        entry_id=entry_id,
        error_class=text("error_class") or ErrorClass.POISON,
        last_error=text("last_error") or text("reason"),
        delivery_id=text("delivery_id") or (work.delivery_id if work else ""),
        notification_id=text("notification_id") or (work.notification_id if work else ""),
        notification_type=text("type") or (work.notification_type if work else ""),
        channel=text("channel") or (work.channel if work else ""),
        priority=text("priority") or (work.priority if work else ""),
        producer=text("producer") or (work.producer if work else ""),
        attempts=number("attempts"),
        first_attempt_ms=number("first_attempt_ms"),
        last_attempt_ms=number("last_attempt_ms"),
        worker=text("worker"),
        worker_version=text("worker_version"),
        version=int(version) if version.isdigit() else None,
        work_entry_id=text("work_entry_id"),
        work=work,
        other_fields=tuple(sorted(set(fields) - _KNOWN)),
    )


def _work_item(raw: bytes | None) -> WorkItem | None:
    if raw is None:
        return None
    try:
        return codec.decode_work_item(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def resolution_mark(outcome: str, operator: str, reason: str, at_ms: int) -> str:
    """The ``dlq:resolved`` value of an entry a replay settled (``replay.lua`` writes
    the same JSON)."""
    return json.dumps({"outcome": outcome, "operator": operator, "reason": reason, "at_ms": at_ms})


def parse_resolution(raw: Any) -> Resolution | None:
    """A ``dlq:resolved`` value; None for none. A mark nobody can read still settles it."""
    if raw is None:
        return None
    try:
        mark = json.loads(raw)
        return Resolution(
            str(mark["outcome"]), str(mark["operator"]), str(mark["reason"]), int(mark["at_ms"])
        )
    except (ValueError, KeyError, TypeError):
        return Resolution("unknown", "", "", 0)
