"""The one place events and work items are turned into bytes and back (JSON via msgspec)."""

from __future__ import annotations

import msgspec

from streams.events import AnyEvent
from streams.work_items import WorkItem

_encoder = msgspec.json.Encoder()
_event_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)
_work_decoder = msgspec.json.Decoder(WorkItem)

# Stream entry field names.
EVENT_FIELD = "e"
WORK_FIELD = "w"


def encode(value: msgspec.Struct) -> bytes:
    """Encode an event, a work item or a setting stored in Redis."""
    return _encoder.encode(value)


def decode_event(raw: bytes | str) -> AnyEvent:
    """Decode one event; raises ``msgspec.DecodeError`` (or ``ValidationError``) if it is not."""
    return _event_decoder.decode(raw)


def decode_work_item(raw: bytes | str) -> WorkItem:
    """Decode one work item; raises ``msgspec.DecodeError`` if it is not one."""
    return _work_decoder.decode(raw)
