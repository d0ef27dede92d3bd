"""What an ingest request's trace span says about it (tracing on only): the producer, the
types and priorities of its notifications, and the ids of those accepted, read back from
their answers (``note_on_span``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from app import tracing
from app.catalog import TypeConfig
from app.ingest.answers import IngestAnswer
from app.ingest.requests import NotificationRequest


class _AcceptedId(msgspec.Struct):
    id: str


# The id in an accepted body, for the request's span (tracing on only).
_accepted_id = msgspec.json.Decoder(_AcceptedId)


def note_on_span(
    types: Mapping[str, TypeConfig],
    producer: str,
    entries: Sequence[tuple[str, NotificationRequest | IngestAnswer]],
    answers: Sequence[IngestAnswer],
) -> None:
    """Describe the request on its trace's span (tracing on only); ``types``: the catalog's."""
    kinds = [
        (request.type, str(request.priority or types[request.type].priority))
        for _, request in entries
        if isinstance(request, NotificationRequest) and request.type in types
    ]
    accepted = [_accepted_id.decode(answer.response).id for answer in answers if answer.accepted]
    tracing.note_ingest(producer, kinds, accepted, len(entries))
