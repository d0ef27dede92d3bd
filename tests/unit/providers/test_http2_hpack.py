"""hpack's coder as the push client hands it to h2: the encoder indexes nothing (credentials
marked never to be), writes no Huffman code and takes a field it wrote before from memory,
and what it writes any HPACK decoder reads back field for field; the decoder reads a block
again from memory while its table holds the same entries, anew once an entry was added or
evicted; memory is bounded."""

from __future__ import annotations

import hpack
import pytest

from app.providers.http2_hpack import MAX_BLOCKS, MAX_FIELDS, Decoder, Encoder

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"https"),
    (b":authority", b"fcm.googleapis.com"),
    (b":path", b"/v1/projects/p/messages:send"),
    (b"authorization", b"Bearer " + b"t" * 300),
    (b"content-type", b"application/json"),
]


def plain(fields: object) -> list[tuple[bytes, bytes]]:
    return [(bytes(name), bytes(value)) for name, value in fields]  # type: ignore[attr-defined]


def test_what_the_encoder_writes_a_decoder_reads_back_again_and_again() -> None:
    encoder, decoder = Encoder(), hpack.Decoder()
    blocks = [encoder.encode(REQUEST) for _ in range(3)]
    assert [plain(decoder.decode(block, raw=True)) for block in blocks] == [plain(REQUEST)] * 3
    # The first block starts by setting the table's size to 0; the others are the same
    # bytes without it, field by field from memory.
    assert blocks[0] == b"\x20" + blocks[1]
    assert blocks[1] == blocks[2]
    assert b"".join(encoder._fields[field] for field in REQUEST) == blocks[1]


def test_nothing_is_indexed_credentials_never_and_no_literal_is_huffman_coded() -> None:
    encoder, decoder = Encoder(), hpack.Decoder()
    block = encoder.encode(REQUEST)
    decoder.decode(block, raw=True)
    assert not encoder.header_table.dynamic_entries
    assert not decoder.header_table.dynamic_entries
    assert decoder.header_table.maxsize == 0
    assert block[-len(b"application/json") :] == b"application/json"
    authorization = block.index(b"Bearer ")
    # 6.2.3, never indexed, the static name 23 (15 + 8), then the value's length over 127.
    assert block[authorization - 5 : authorization] == b"\x1f\x08\x7f\xb4\x01"


def test_fields_that_differ_each_time_leave_the_table_and_other_blocks_as_they_were() -> None:
    encoder, decoder = Encoder(), hpack.Decoder()
    decoder.decode(encoder.encode(REQUEST), raw=True)
    remembered = encoder.encode(REQUEST)
    for n in range(100):
        other = [*REQUEST, (b"apns-collapse-id", b"n%d" % n)]
        assert plain(decoder.decode(encoder.encode(other), raw=True)) == plain(other)
    assert encoder.encode(REQUEST) == remembered
    assert not decoder.header_table.dynamic_entries


def test_the_server_s_table_size_leaves_the_table_empty() -> None:
    encoder = Encoder()
    encoder.encode(REQUEST)
    encoder.header_table_size = 4096  # as h2 sets it from the server's SETTINGS
    assert (encoder.header_table_size, encoder.header_table.resized) == (0, False)
    # 6.2.1 (the table of size 0 keeps nothing, 4.4), the name and value as literals.
    assert encoder.encode([(b"x-new", b"1")]) == b"\x40\x05x-new\x011"


def test_the_decoder_reads_a_block_again_from_memory_while_the_table_stays() -> None:
    encoder, decoder = hpack.Encoder(), Decoder(max_header_list_size=65_536)
    answer = [(b":status", b"200"), (b"content-type", b"application/json")]
    first, second = encoder.encode(answer), encoder.encode(answer)
    assert decoder.decode(first, raw=True) == answer  # indexes content-type: not remembered
    assert decoder._lists == {}
    fields = decoder.decode(second, raw=True)
    assert fields == answer
    assert decoder._lists == {second: tuple(answer)}
    fields.append((b"x", b"y"))  # each reading is a list of its own
    assert decoder.decode(second, raw=True) == answer


def test_the_same_bytes_are_read_anew_once_the_table_changed() -> None:
    encoder, decoder = hpack.Encoder(), Decoder(max_header_list_size=65_536)
    tags = [b"a", b"a", b"b", b"b", b"a", b"a"]
    blocks = [encoder.encode([(b":status", b"200"), (b"x-tag", tag)]) for tag in tags]
    assert blocks[1] == blocks[3]  # "the newest entry", which is a, then b
    assert [dict(decoder.decode(block, raw=True))[b"x-tag"] for block in blocks] == tags


def test_a_block_over_the_header_list_bound_is_refused() -> None:
    block = hpack.Encoder().encode([(b"x-long", b"v" * 2000)])
    with pytest.raises(hpack.OversizedHeaderListError):
        Decoder(max_header_list_size=1000).decode(block, raw=True)


def test_memory_is_bounded() -> None:
    encoder, decoder = Encoder(), hpack.Decoder()
    for n in range(2 * MAX_FIELDS + 10):
        fields = [(b":path", b"/%d" % n)]
        assert plain(decoder.decode(encoder.encode(fields), raw=True)) == plain(fields)
    assert len(encoder._fields) == 9  # the first block's field was encoded with the table size
    server, client = hpack.Encoder(), Decoder(max_header_list_size=65_536)
    server.header_table_size = 0
    for n in range(2 * MAX_BLOCKS):
        client.decode(server.encode([(b"location", b"/%d" % n)]), raw=True)
    assert len(client._lists) == MAX_BLOCKS
