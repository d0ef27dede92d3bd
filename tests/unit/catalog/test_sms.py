"""SMS encodings and segments, as a phone network counts them."""

from __future__ import annotations

import pytest

from app.catalog import sms
from app.catalog.sms import GSM_7, UCS_2, measure_sms


def test_the_gsm_tables_have_their_sizes() -> None:
    # 128 codes of which 0x1B is the escape; the extension table sends 10 more.
    assert len(sms._GSM_BASIC) == 127
    assert len(sms._GSM_EXTENSION) == 10


@pytest.mark.parametrize(
    ("text", "encoding", "segments"),
    [
        ("", GSM_7, 1),
        ("a" * 160, GSM_7, 1),
        ("a" * 161, GSM_7, 2),
        ("a" * 306, GSM_7, 2),
        ("a" * 307, GSM_7, 3),
        ("Grüße, Åsa! £5 @ 10:00 ¡Olé! Ñ§ Ça ¿ΔΩ?", GSM_7, 1),
        # The extension table counts two septets: 80 euro signs fill one segment, 81 do not.
        ("€" * 80, GSM_7, 1),
        ("€" * 81, GSM_7, 2),
        ("{[~^|\\]}" * 10, GSM_7, 1),
        ("{[~^|\\]}" * 11, GSM_7, 2),
        # An escape and its character stay in one segment: 152 + a euro sign needs a second.
        ("a" * 152 + "€" + "a" * 7, GSM_7, 2),
        ("a" * 152 + "€" + "a" * 8, GSM_7, 2),
        ("a" * 152 + "€" + "a" * 153, GSM_7, 3),
        # Anything else is UCS-2, counted in UTF-16 code units.
        ("`backtick`", UCS_2, 1),
        ("ç" * 70, UCS_2, 1),
        ("ç" * 71, UCS_2, 2),
        ("Ж" * 134, UCS_2, 2),
        ("Ж" * 135, UCS_2, 3),
        ("🙂" * 35, UCS_2, 1),  # each emoji is a surrogate pair: two units
        ("🙂" * 36, UCS_2, 2),
        ("a" * 66 + "🙂" + "a" * 66, UCS_2, 3),  # the pair is not split over two segments
        ("a" * 65 + "🙂" + "a" * 67, UCS_2, 2),
    ],
)
def test_an_sms_has_an_encoding_and_segments(text: str, encoding: str, segments: int) -> None:
    assert measure_sms(text) == (encoding, segments)
