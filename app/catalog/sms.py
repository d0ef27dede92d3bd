"""SMS: the encoding a text needs (GSM-7 when every character has one, else UCS-2) and how
many segments it takes, as a phone network counts them (GSM 03.38, 3GPP TS 23.040)."""

from __future__ import annotations

from typing import Final

GSM_7: Final = "GSM-7"
UCS_2: Final = "UCS-2"
# GSM 03.38: the basic character set (0x1B, the escape to the extension table, is no
# character), and the extension table, whose characters take two septets each.
_GSM_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
_GSM_EXTENSION = frozenset("\f^{}\\[~]|€")
_GSM = _GSM_BASIC | _GSM_EXTENSION
# (one segment, each segment of a concatenated message), in septets or UTF-16 code units;
# concatenation takes the rest for its header.
_GSM_SEGMENT = (160, 153)
_UCS_SEGMENT = (70, 67)


def measure_sms(text: str) -> tuple[str, int]:
    """The encoding ``text`` is sent in (GSM-7 if every character has one, else UCS-2)
    and the number of segments it takes."""
    # issuperset reads the text's characters as they come (no set of them is built), and
    # stops at the first one outside the table.
    if _GSM_BASIC.issuperset(text):
        return GSM_7, _segments(len(text), None, _GSM_SEGMENT)
    if _GSM.issuperset(text):
        sizes = [2 if character in _GSM_EXTENSION else 1 for character in text]
        return GSM_7, _segments(sum(sizes), sizes, _GSM_SEGMENT)
    units = len(text.encode("utf-16-le")) // 2
    if units == len(text):  # no surrogate pairs
        return UCS_2, _segments(units, None, _UCS_SEGMENT)
    sizes = [2 if ord(character) > 0xFFFF else 1 for character in text]
    return UCS_2, _segments(units, sizes, _UCS_SEGMENT)


def _segments(total: int, sizes: list[int] | None, limits: tuple[int, int]) -> int:
    """Segments for ``total`` units; ``sizes``, each character's units where some take two,
    which a phone must not see split over two segments (an escape and its character, the
    halves of a surrogate pair), so such a character moves whole to the next segment."""
    single, each = limits
    if total <= single:
        return 1
    if sizes is None:
        return -(-total // each)
    segments, room = 1, each
    for size in sizes:
        if size > room:
            segments, room = segments + 1, each
        room -= size
    return segments
