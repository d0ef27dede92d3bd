"""``hpack``'s encoder and decoder as the push client's HTTP/2 connection hands them to ``h2``:
the encoder with a table kept empty, each remembering what it coded.

The encoder keeps its table empty and says so in its first block (RFC 7541 4.2, 6.3; a
server's SETTINGS_HEADER_TABLE_SIZE is only an upper bound): every field goes out as a
literal, by the static table's index where it has one, that no table keeps (4.4). An
indexed field would save bytes, but ``hpack`` looks every field up by walking the whole
table, and requests whose fields differ each time (a Web Push endpoint's path, an APNs
collapse id) would fill it with entries never used again: the walk cost a Web Push send
more than its encryption. With the table empty a field is always the same bytes, so each
is encoded once and then taken from memory (the fields last used; most are the same in
every request). Literal values are not Huffman-coded: it saves a third of the encoder's time
for a few bytes.

The decoder follows whatever the server indexes, and a server answers alike again and again:
a header block's meaning depends only on its bytes and the table, so while the table holds
the same entries a block read before means what it meant then. Decoding one in ``hpack``
costs 20-40 µs of Python; looking it up well under one. An entry added (a new newest) or
evicted (fewer entries, or a new newest at the same count) changes what indices mean: every
block remembered is forgotten then. A block that changed the table as it was decoded is not
remembered, since a second time would not change it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import hpack

MAX_FIELDS: Final = 1024  # encoded fields remembered
# Credentials: a decoder must never index them, nor an intermediary (RFC 7541 7.1.3).
SENSITIVE: Final = frozenset({b"authorization", b"proxy-authorization", b"cookie"})
MAX_BLOCKS: Final = 64  # decoded blocks remembered, each table state


def _state(table: hpack.table.HeaderTable) -> tuple[int, object]:
    entries = table.dynamic_entries
    return len(entries), entries[0] if entries else None


class Encoder(hpack.Encoder):
    """``hpack.Encoder`` with its table kept empty, remembering fields (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self._fields: dict[tuple[bytes, bytes], bytes] = {}
        self.header_table.maxsize = 0
        self.table_size_changes.append(0)  # written at the start of the first block

    @property
    def header_table_size(self) -> int:
        return self.header_table.maxsize

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        """The server's SETTINGS_HEADER_TABLE_SIZE, a bound: the table stays empty."""

    def encode(self, headers: Any, huffman: bool = False) -> bytes:
        """The block of ``headers``, (name, value) pairs of bytes as h2 hands them on; the
        ``SENSITIVE`` ones never to be indexed (6.2.3)."""
        if self.header_table.resized:  # the first block: it starts with the table's size
            marked = [(name, value, name in SENSITIVE) for name, value in headers]
            return super().encode(marked, huffman=False)
        fields, parts = self._fields, []
        for field in headers:
            part = fields.get(field)
            if part is None:
                part = self.add(field, field[0] in SENSITIVE, huffman=False)
                if len(fields) >= MAX_FIELDS:
                    fields.clear()
                fields[field] = part
            parts.append(part)
        return b"".join(parts)


class Decoder(hpack.Decoder):
    """``hpack.Decoder`` remembering the header lists of blocks it decoded (see the module)."""

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self._lists: dict[bytes, Sequence[tuple[bytes, bytes]]] = {}

    def decode(self, data: bytes, raw: bool = False) -> Iterable[Any]:
        if not raw:  # h2 asks for raw fields; anything else is decoded as hpack would
            return super().decode(data, raw=False)
        fields = self._lists.get(data)
        if fields is not None:
            return list(fields)
        before = _state(self.header_table)
        decoded = [(bytes(name), bytes(value)) for name, value in super().decode(data, raw=True)]
        if _state(self.header_table) != before:
            self._lists.clear()
        elif len(self._lists) < MAX_BLOCKS:
            self._lists[bytes(data)] = tuple(decoded)
        return decoded
