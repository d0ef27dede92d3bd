"""The one place events and work items are turned into bytes and back (JSON via msgspec)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from streams.events import AnyEvent, Event
from streams.work_items import WorkItem

_encoder = msgspec.json.Encoder()
_event_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)
_events_decoder: msgspec.json.Decoder[list[AnyEvent]] = msgspec.json.Decoder(list[AnyEvent])
_work_decoder = msgspec.json.Decoder(WorkItem)

# Stream entry field names. An ``events`` entry holds the events of one atomic write as a
# JSON array under EVENT_FIELD; a work entry holds one work item under WORK_FIELD.
EVENT_FIELD = "e"
WORK_FIELD = "w"


def encode(value: msgspec.Struct) -> bytes:
    """Encode an event, a work item or a setting stored in Redis."""
    return _encoder.encode(value)


def encode_events(events: Sequence[Event]) -> bytes:
    """Encode the events of one atomic write: the value of one ``events`` stream entry."""
    return _encoder.encode(events)


def decode_events(raw: bytes | str) -> list[AnyEvent]:
    """Decode one ``events`` stream entry; raises ``msgspec.DecodeError`` if it is not one."""
    return _events_decoder.decode(raw)


def decode_event(raw: bytes | str) -> AnyEvent:
    """Decode one event; raises ``msgspec.DecodeError`` (or ``ValidationError``) if it is not."""
    return _event_decoder.decode(raw)


def decode_work_item(raw: bytes | str) -> WorkItem:
    """Decode one work item; raises ``msgspec.DecodeError`` if it is not one."""
    return _work_decoder.decode(raw)
