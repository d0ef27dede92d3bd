"""HTTP/2's wire format as the APNs and FCM client uses it: frames (RFC 9113 section 4) and request
header blocks (HPACK, RFC 7541).

A request's header block is written as literals that the server's decoder adds to no table
(RFC 7541 6.2.2 "without indexing", and 6.2.3 "never indexed" for credentials), naming a
header by its static-table index where it has one, without Huffman coding. The encoder then
keeps no state at all: nothing to evict, no table size to follow, no block that depends on
the one before. It costs bytes (a provider token travels with every request, about 300
bytes of header block a request instead of about 100) and saves the CPU that indexing,
searching the table and Huffman coding took in Python. Answers are decoded with ``hpack``'s
decoder, which follows whatever the server indexes.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable
from enum import IntEnum
from typing import Final

from hpack.table import HeaderTable

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_BYTES: Final = 9
# The least SETTINGS_MAX_FRAME_SIZE: the frames a client may send before it hears otherwise,
# and the largest it takes (it announces no other).
MIN_MAX_FRAME: Final = 16_384
MAX_MAX_FRAME: Final = 2**24 - 1
MAX_WINDOW: Final = 2**31 - 1
DEFAULT_WINDOW: Final = 65_535

# Flags: END_STREAM on DATA and HEADERS, ACK on SETTINGS and PING.
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY: Final = 0x20

_HEAD = struct.Struct(">HBBBL")  # the length in 16 + 8 bits, type, flags, stream id
_SETTING = struct.Struct(">HL")
_TWO_WORDS = struct.Struct(">LL")
# Credentials: a decoder must never index them, nor an intermediary (RFC 7541 7.1.3).
_SENSITIVE: Final = frozenset({b"authorization", b"proxy-authorization", b"cookie"})


class FrameType(IntEnum):
    DATA = 0x0
    HEADERS = 0x1
    PRIORITY = 0x2
    RST_STREAM = 0x3
    SETTINGS = 0x4
    PUSH_PROMISE = 0x5
    PING = 0x6
    GOAWAY = 0x7
    WINDOW_UPDATE = 0x8
    CONTINUATION = 0x9


class Setting(IntEnum):
    HEADER_TABLE_SIZE = 0x1
    ENABLE_PUSH = 0x2
    MAX_CONCURRENT_STREAMS = 0x3
    INITIAL_WINDOW_SIZE = 0x4
    MAX_FRAME_SIZE = 0x5
    MAX_HEADER_LIST_SIZE = 0x6


class ErrorCode(IntEnum):
    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9


class ProtocolError(Exception):
    """The peer broke HTTP/2: the connection ends with a GOAWAY carrying ``code``."""

    def __init__(self, code: ErrorCode, why: str) -> None:
        super().__init__(why)
        self.code = code


def frame(kind: FrameType, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame, ready to write."""
    size = len(payload)
    return _HEAD.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


def frame_header(buffer: bytes | bytearray, offset: int) -> tuple[int, int, int, int]:
    """The length, type, flags and stream id of the frame at ``offset``."""
    high, low, kind, flags, stream_id = _HEAD.unpack_from(buffer, offset)
    return high << 8 | low, kind, flags, stream_id & MAX_WINDOW


def settings(values: Iterable[tuple[Setting, int]]) -> bytes:
    """A SETTINGS frame announcing ``values``."""
    return frame(FrameType.SETTINGS, 0, 0, b"".join(_SETTING.pack(*pair) for pair in values))


def read_settings(payload: bytes) -> list[tuple[int, int]]:
    """The (identifier, value) pairs of a SETTINGS frame's payload."""
    if len(payload) % _SETTING.size:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a SETTINGS frame of a broken length")
    return [_SETTING.unpack_from(payload, at) for at in range(0, len(payload), _SETTING.size)]


def word(payload: bytes) -> int:
    """The 31-bit number at the start of a payload (WINDOW_UPDATE, GOAWAY's stream id)."""
    if len(payload) < 4:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a frame too short for its fields")
    return int.from_bytes(payload[:4], "big") & MAX_WINDOW


def two_words(payload: bytes) -> tuple[int, int]:
    """GOAWAY's last stream id and error code."""
    if len(payload) < _TWO_WORDS.size:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a GOAWAY too short for its fields")
    last, code = _TWO_WORDS.unpack_from(payload)
    return last & MAX_WINDOW, code


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(FrameType.WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def rst_stream(stream_id: int, code: ErrorCode) -> bytes:
    return frame(FrameType.RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


def goaway(last_stream_id: int, code: ErrorCode) -> bytes:
    return frame(FrameType.GOAWAY, 0, 0, _TWO_WORDS.pack(last_stream_id, code))


def unpadded(flags: int, payload: bytes, *, priority: bool = False) -> bytes:
    """A DATA or HEADERS payload without its padding (and a HEADERS' priority fields)."""
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload or payload[0] >= end:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "padding longer than the frame")
        start, end = 1, end - payload[0]
    if priority and flags & PRIORITY:
        start += 5
    if start > end:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a frame too short for its fields")
    return payload[start:end]


def _integer(value: int, prefix_bits: int, pattern: int) -> bytes:
    """An HPACK integer (RFC 7541 5.1) in a first byte holding ``pattern``'s high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([pattern | value])
    out = bytearray([pattern | limit])
    value -= limit
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(raw: bytes) -> bytes:
    """An HPACK string literal without Huffman coding (RFC 7541 5.2)."""
    return _integer(len(raw), 7, 0x00) + raw


# RFC 7541 Appendix A, as hpack has it: the first index of each name, and whole fields.
_STATIC_NAMES: Final[dict[bytes, int]] = {}
for _index, (_name, _value) in enumerate(HeaderTable.STATIC_TABLE, start=1):
    _STATIC_NAMES.setdefault(_name, _index)
_STATIC_FIELDS: Final = {
    field: index for index, field in enumerate(HeaderTable.STATIC_TABLE, start=1) if field[1]
}


@functools.lru_cache(maxsize=256)  # most fields are the same in every request
def header_field(name: bytes, value: bytes) -> bytes:
    """One field of a request's header block (see the module documentation)."""
    whole = _STATIC_FIELDS.get((name, value))
    if whole is not None:
        return _integer(whole, 7, 0x80)  # 6.1: the static table's own field
    pattern = 0x10 if name in _SENSITIVE else 0x00
    index = _STATIC_NAMES.get(name)
    if index is None:
        return bytes([pattern]) + _string(name) + _string(value)
    return _integer(index, 4, pattern) + _string(value)


def header_block(fields: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A request's header block: pseudo-header fields first, as the caller orders them."""
    return b"".join([header_field(name, value) for name, value in fields])


def headers_frames(stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """The HEADERS frame of ``block``, with CONTINUATION frames where it is too long."""
    flags = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return frame(FrameType.HEADERS, flags | END_HEADERS, stream_id, block)
    parts = [block[at : at + max_frame] for at in range(0, len(block), max_frame)]
    frames = [frame(FrameType.HEADERS, flags, stream_id, parts[0])]
    frames += [frame(FrameType.CONTINUATION, 0, stream_id, part) for part in parts[1:-1]]
    frames.append(frame(FrameType.CONTINUATION, END_HEADERS, stream_id, parts[-1]))
    return b"".join(frames)
