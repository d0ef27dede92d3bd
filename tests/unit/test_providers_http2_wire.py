"""HTTP/2's wire format as the APNs client writes and reads it: header blocks that ``hpack``'s
decoder reads back field for field without adding anything to its table, credentials
marked never-indexed, long blocks split into CONTINUATION frames, frames and their padding
read as RFC 9113 lays them out."""

from __future__ import annotations

import hpack
import pytest
from hyperframe.frame import DataFrame, Frame, HeadersFrame, SettingsFrame

from app.providers.http2_wire import (
    END_HEADERS,
    END_STREAM,
    PADDED,
    PRIORITY,
    ErrorCode,
    FrameType,
    ProtocolError,
    Setting,
    frame,
    frame_header,
    goaway,
    header_block,
    header_field,
    headers_frames,
    read_settings,
    settings,
    two_words,
    unpadded,
    word,
)

REQUEST = [
    (b":method", b"POST"),  # the static table's own field
    (b":scheme", b"https"),
    (b":authority", b"api.push.apple.com"),  # a static name, a literal value
    (b":path", b"/3/device/" + b"ab" * 32),
    (b"authorization", b"bearer " + b"j" * 300),  # a value over 127 bytes: a long length
    (b"apns-topic", b"com.example.clarion"),  # a name of its own
    (b"apns-expiration", b"0"),
]


def test_a_header_block_decodes_to_the_same_fields_and_leaves_the_table_empty() -> None:
    decoder = hpack.Decoder()
    for _ in range(3):  # the same block every time: nothing depends on the one before
        assert decoder.decode(header_block(REQUEST), raw=True) == REQUEST
    assert len(decoder.header_table.dynamic_entries) == 0


def test_credentials_are_never_indexed_and_other_fields_are_not_indexed() -> None:
    decoded = hpack.Decoder().decode(header_block(REQUEST), raw=False)
    never = {field[0] for field in decoded if isinstance(field, hpack.NeverIndexedHeaderTuple)}
    assert never == {"authorization"}
    assert header_field(b"apns-topic", b"x")[0] == 0x00  # literal, new name, not indexed
    assert header_field(b":path", b"/")[0] == 0x84  # the static table's ":path: /" itself
    assert header_field(b":path", b"/a")[0] == 0x04  # its name, index 4, a literal value


def test_a_name_at_a_static_index_of_15_or_more_takes_a_second_byte() -> None:
    # "accept-charset" is index 15: the 4-bit prefix is full (RFC 7541 5.1).
    assert header_field(b"accept-charset", b"x")[:2] == bytes([0x0F, 0x00])
    assert hpack.Decoder().decode(header_field(b"www-authenticate", b"y"), raw=True) == [
        (b"www-authenticate", b"y")
    ]


def test_frames_are_laid_out_as_rfc_9113_says() -> None:
    payload = b"x" * 70_000
    written = frame(FrameType.DATA, END_STREAM, 5, payload)
    parsed, length = Frame.parse_frame_header(memoryview(written[:9]))
    assert (type(parsed), parsed.stream_id, length, parsed.flags) == (
        DataFrame, 5, 70_000, {"END_STREAM"},
    )  # fmt: skip
    assert frame_header(written, 0) == (70_000, FrameType.DATA, END_STREAM, 5)
    announced, _ = Frame.parse_frame_header(memoryview(settings([(Setting.ENABLE_PUSH, 0)])[:9]))
    assert isinstance(announced, SettingsFrame)
    assert read_settings(settings([(Setting.ENABLE_PUSH, 0)])[9:]) == [(2, 0)]
    assert two_words(goaway(7, ErrorCode.PROTOCOL_ERROR)[9:]) == (7, ErrorCode.PROTOCOL_ERROR)


def test_a_block_longer_than_a_frame_continues_in_continuation_frames() -> None:
    block = header_block([*REQUEST, (b"x-long", b"v" * 40_000)])
    written = headers_frames(3, block, True, 16_384)
    kinds, flags, parts, offset = [], [], [], 0
    while offset < len(written):
        length, kind, flag, stream_id = frame_header(written, offset)
        assert stream_id == 3
        kinds.append(kind)
        flags.append(flag)
        parts.append(written[offset + 9 : offset + 9 + length])
        offset += 9 + length
    assert kinds == [FrameType.HEADERS, FrameType.CONTINUATION, FrameType.CONTINUATION]
    assert flags == [END_STREAM, 0, END_HEADERS]
    assert b"".join(parts) == block
    single = headers_frames(1, header_block(REQUEST), False, 16_384)
    assert frame_header(single, 0)[1:3] == (FrameType.HEADERS, END_HEADERS)


def test_padding_and_priority_fields_are_taken_off() -> None:
    data = DataFrame(1, b"answer", flags=["PADDED"])
    data.pad_length = 9
    body = data.serialize()[9:]
    assert unpadded(PADDED, body) == b"answer"
    headers = HeadersFrame(1, b"block", flags=["PADDED", "PRIORITY"])
    headers.pad_length, headers.depends_on, headers.stream_weight = 3, 0, 15
    assert unpadded(PADDED | PRIORITY, headers.serialize()[9:], priority=True) == b"block"
    assert unpadded(0, b"plain") == b"plain"


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda: unpadded(PADDED, b"\x05abc"), ErrorCode.PROTOCOL_ERROR),  # padding too long
        (lambda: unpadded(PRIORITY, b"abc", priority=True), ErrorCode.FRAME_SIZE_ERROR),
        (lambda: read_settings(b"\x00\x01\x00"), ErrorCode.FRAME_SIZE_ERROR),
        (lambda: word(b"\x00"), ErrorCode.FRAME_SIZE_ERROR),
        (lambda: two_words(b"\x00\x00\x00\x01"), ErrorCode.FRAME_SIZE_ERROR),
    ],
)
def test_broken_frames_are_protocol_errors_with_their_code(call: object, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code is code
