"""The one place events and work items are turned into bytes and back (JSON via msgspec)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from streams.core.events import AnyEvent, Event
from streams.delivery.work_items import WorkItem

_encoder = msgspec.json.Encoder()
_event_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)
_events_decoder: msgspec.json.Decoder[list[AnyEvent]] = msgspec.json.Decoder(list[AnyEvent])
_work_decoder = msgspec.json.Decoder(WorkItem)

# Stream entry field names. An ``events`` entry holds the events of one atomic write as a
# JSON array under EVENT_FIELD; a work entry holds one work item under WORK_FIELD.
EVENT_FIELD = "e"
WORK_FIELD = "w"


def as_text(value: bytes | str) -> str:
    """A string from Redis as text: redis-py answers bytes unless its client decodes."""
    return value.decode() if isinstance(value, bytes) else value


def encode(value: msgspec.Struct) -> bytes:
    """Encode an event, a work item or a setting stored in Redis."""
    return _encoder.encode(value)


# How an item without a trace ends when msgspec encodes it: msgspec writes every field of an
# array-like struct, trailing defaults too (``omit_defaults`` does not apply to arrays).
_UNTRACED_END = b',""]'
_NO_WAIT_END = b",0]"  # a work item's last field when it waits for no address
_NO_SEND_AT_END = b",0]"  # its last field when it is not sent later
_NO_STEPS_END = b",0,[],[],false,[]]"  # its last fields without a step or fallback


def encode_work_item(item: WorkItem) -> bytes:
    """Encode a work item. One without a step or fallback is written without those last
    fields (their defaults), one not sent later is written without that last field (0), one
    that waits for no address without that one (0) too, and one without a trace (tracing
    off) without that empty field as well, byte for byte as before items carried any of
    them: the decoder's defaults restore them."""
    encoded = _encoder.encode(item)
    if not encoded.endswith(_NO_STEPS_END):  # a step or a fallback: every field is written
        return encoded
    encoded = encoded[: -len(_NO_STEPS_END)] + b"]"
    if item.send_at_ms:  # sent later: every field before is written
        return encoded
    encoded = encoded[: -len(_NO_SEND_AT_END)] + b"]"
    if item.await_until_ms:  # waiting for an address: every field before is written
        return encoded
    # Not waiting for an address: that last field, 0, is left out as well.
    encoded = encoded[: -len(_NO_WAIT_END)] + b"]"
    if item.trace or not encoded.endswith(_UNTRACED_END):
        return encoded
    # The last field is an empty default, whichever it is: the decoder restores it.
    return encoded[: -len(_UNTRACED_END)] + b"]"


def encode_events(events: Sequence[Event]) -> bytes:
    """Encode a list of events as one JSON array (a part of, or a whole, ``events`` entry)."""
    return _encoder.encode(events)


def join_events(arrays: Sequence[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    """Join encoded event arrays (``b""`` for none) into one array, the value of one
    ``events`` entry; with, for each array, the 1-based first and last byte of its events
    within the joined one ((1, 0) for none), so that a Lua script can cut them out again.

    A script that writes only some of its items' events cuts theirs out; one that writes
    them all appends the joined array as it is. Joining here, not in Lua, matters: building
    a large string in Redis's Lua costs more than the XADDs it saves.
    """
    parts: list[bytes] = []
    spans: list[tuple[int, int]] = []
    length = 1  # the opening bracket
    for array in arrays:
        inner = array[1:-1]
        if not inner:
            spans.append((1, 0))
            continue
        if parts:
            length += 1  # the comma before it
        spans.append((length + 1, length + len(inner)))
        length += len(inner)
        parts.append(inner)
    return b"[" + b",".join(parts) + b"]", spans


def span_text(spans: Sequence[tuple[int, int]]) -> bytes:
    """``join_events``'s spans as the scripts take them: one argument, "1 420 422 845 ...",
    parsed only when some item's events must be cut out (one argument per call instead of
    two per item: every argument costs Redis and Lua work, see ``streams/ingest/ingest.lua``)."""
    return b" ".join(b"%d %d" % span for span in spans)


def decode_events(raw: bytes | str) -> list[AnyEvent]:
    """Decode one ``events`` stream entry; raises ``msgspec.DecodeError`` if it is not one."""
    return _events_decoder.decode(raw)


def decode_event(raw: bytes | str) -> AnyEvent:
    """Decode one event; raises ``msgspec.DecodeError`` (or ``ValidationError``) if it is not."""
    return _event_decoder.decode(raw)


def decode_work_item(raw: bytes | str) -> WorkItem:
    """Decode one work item; raises ``msgspec.DecodeError`` if it is not one."""
    return _work_decoder.decode(raw)
