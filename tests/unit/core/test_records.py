"""A record naming its digest is written without encoding it again (``naming_digest``): the
bytes must be exactly what encoding the record with that field set makes, or the record read
back would differ from the one planned."""

from __future__ import annotations

import msgspec

from streams.core.records import (
    DeliveryAtAcceptance,
    NotificationRecord,
    decode_record,
    encode_record,
    naming_digest,
)
from streams.core.vocabulary import Channel, Priority
from streams.delivery.state import DeliveryStatus


def record(**fields: object) -> NotificationRecord:
    delivery = DeliveryAtAcceptance(
        id="d-1", channel=Channel.EMAIL, status=DeliveryStatus.DIGESTED, reason="digest"
    )
    return NotificationRecord(
        id="n-1", type="comment", priority=Priority.NORMAL, recipient_id="u-1",
        producer="shop", created_ms=1, expires_ms=2, deliveries=[delivery], **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def test_naming_a_digest_is_encoding_the_record_with_it() -> None:
    for plain in (record(), record(cancellation_key="c-1"), record(campaign_id='c"1\\')):
        named = naming_digest(encode_record(plain), 'dg-"1"')
        assert named == encode_record(msgspec.structs.replace(plain, digest_id='dg-"1"'))
        assert decode_record(named).digest_id == 'dg-"1"'
    assert decode_record(encode_record(record())).digest_id == ""
