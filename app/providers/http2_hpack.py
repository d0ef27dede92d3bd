"""``hpack``'s encoder and decoder as the push client's HTTP/2 connection hands them to ``h2``,
each remembering the header blocks it made or read while its table stays as it is.

A client sends the same fields again and again (an FCM request's are the same for an hour),
and a server answers alike again and again: HPACK's output for a header list depends only on
the list and the table, so while the table holds the same entries the block is the same
bytes, and a block read before means what it meant then. Encoding or decoding one in
``hpack`` costs 20-40 µs of Python; looking it up costs well under one. An entry added (a
new newest) or evicted (fewer entries, or a new newest at the same count) changes what
indices mean: every block remembered is forgotten then. A block that changed the table as
it was encoded or decoded is not remembered, since a second time would not change it.

Literal values are not Huffman-coded: it saves a third of the encoder's time for a few bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import hpack

MAX_BLOCKS: Final = 64  # remembered per direction, each table state


def _state(table: hpack.table.HeaderTable) -> tuple[int, object]:
    entries = table.dynamic_entries
    return len(entries), entries[0] if entries else None


class Encoder(hpack.Encoder):
    """``hpack.Encoder`` remembering the blocks of header lists it encoded (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[tuple[Any, ...], bytes] = {}

    def encode(self, headers: Any, huffman: bool = False) -> bytes:
        # Each field's class (never indexed or not) follows from its name, so the fields'
        # names and values say what the block will be.
        key = tuple(headers)
        block = self._blocks.get(key)
        if block is not None and not self.header_table.resized:
            return block
        before = _state(self.header_table)
        block = super().encode(key, huffman=False)
        if _state(self.header_table) != before:
            self._blocks.clear()
        elif len(self._blocks) < MAX_BLOCKS:
            self._blocks[key] = block
        return block


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
