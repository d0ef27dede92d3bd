"""Write-model records kept in Redis next to the streams.

``ntf:<id>`` holds a ``NotificationRecord``: what was accepted and each delivery's state at
acceptance. A delivery's later state lives in its ``dlv:<id>`` hash, created by the first
worker that touches it; until then the record's entry is the delivery's state.
"""

from __future__ import annotations

import msgspec

from streams.core.vocabulary import Channel, Priority
from streams.delivery.state import DeliveryStatus


class DeliveryAtAcceptance(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str
    channel: Channel
    status: DeliveryStatus
    reason: str = ""
    # When a SCHEDULED delivery is due (ms since the epoch; 0: not scheduled at ingest).
    due_ms: int = 0


class NotificationRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str
    type: str
    priority: Priority
    recipient_id: str
    producer: str
    created_ms: int
    expires_ms: int
    deliveries: list[DeliveryAtAcceptance]
    # The campaign that generated it ("": none), which says whether the producer chose its
    # recipient (the status API shows a segment's recipients only to the ``recipients`` scope).
    campaign_id: str = ""
    # The producer's cancellation key ("": none): ``POST /v1/cancellations`` finds it by it.
    cancellation_key: str = ""
    # The digest it joined as the ingest script accepted it ("": none, or it joined after,
    # which its hour's hash records: ``streams.digests.store.joined_digest``). The last
    # field, as ``naming_digest`` writes it.
    digest_id: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(NotificationRecord)


def encode_record(record: NotificationRecord) -> bytes:
    return _encoder.encode(record)


def decode_record(raw: bytes) -> NotificationRecord:
    return _decoder.decode(raw)


def naming_digest(record: bytes, digest_id: str) -> bytes:
    """An encoded record (without a digest) naming ``digest_id``: what ``encode_record``
    makes of it with that field set, the object's last, without decoding it again."""
    return b'%s,"digest_id":%s}' % (record[:-1], _encoder.encode(digest_id))
