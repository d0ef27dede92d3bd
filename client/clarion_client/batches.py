"""Sending a list of any length through ``POST /v1/notifications/batch``, and uploading a
campaign's recipients of any number through ``POST /v1/campaigns/{id}/recipients``.

The server takes at most ``BATCH_LIMIT`` notifications per request and an idempotency key
per item, not per request. So a list is cut into parts of at most ``BATCH_LIMIT``, and item
``i`` of the whole list (counted from 0) gets the key ``<base key>:<i>`` unless it is a
``BatchItem`` with a key of its own. The keys follow from the base key and the position
alone: the same call made again, after a failure at any part, is answered with what was
accepted the first time and sends only what was not.

An item answered 409 (its key in flight) or 503 is sent again, alone with the others of its
part that were; the rest of the part is settled.

An upload takes at most ``UPLOAD_LIMIT`` recipient ids and one idempotency key per request:
part ``p`` (counted from 0) is sent under ``<base key>:<p>``, so a repeated upload of the same
list adds nobody twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from clarion_client.errors import ServerError
from clarion_client.models import BatchItem, BatchRequest, BatchResult, Notification, with_key

BATCH_LIMIT = 1000
UPLOAD_LIMIT = 10_000
RETRIED_ITEM_STATUSES = frozenset({409, 503})
_encoder = msgspec.json.Encoder()


def keyed_items(notifications: Sequence[Notification], base_key: str) -> list[BatchItem]:
    """Each notification with its idempotency key: its own, or ``<base_key>:<position>``."""
    return [
        item if isinstance(item, BatchItem) else with_key(item, f"{base_key}:{position}")
        for position, item in enumerate(notifications)
    ]


def parts(items: Sequence[BatchItem], limit: int = BATCH_LIMIT) -> list[list[BatchItem]]:
    """``items`` in order, cut into requests of at most ``limit``."""
    return [list(items[start : start + limit]) for start in range(0, len(items), limit)]


def upload_parts(recipients: Sequence[str], base_key: str) -> list[tuple[str, list[str]]]:
    """The upload requests for ``recipients``: each part's key and ids, in order."""
    return [
        (f"{base_key}:{number}", list(recipients[start : start + UPLOAD_LIMIT]))
        for number, start in enumerate(range(0, len(recipients), UPLOAD_LIMIT))
    ]


class PartProgress:
    """One part's items and the results they got so far."""

    def __init__(self, items: Sequence[BatchItem]) -> None:
        self._items = list(items)
        self._results: list[BatchResult | None] = [None] * len(items)
        self._unsettled = list(range(len(items)))  # positions to send (again)

    @property
    def settled(self) -> bool:
        """Whether every item has a final result (accepted, or refused for good)."""
        return not self._unsettled

    def body(self) -> bytes:
        """The request body with the items still unsettled."""
        items = [self._items[position] for position in self._unsettled]
        return _encoder.encode(BatchRequest(notifications=items))

    def record(self, results: Sequence[BatchResult]) -> None:
        """Take the answer to ``body()``: one result per item sent, in order (ServerError
        for an answer with another number of them)."""
        if len(results) != len(self._unsettled):
            detail = f"the batch answer has {len(results)} results for {len(self._unsettled)} items"
            raise ServerError(200, detail)
        again = []
        for position, result in zip(self._unsettled, results, strict=True):
            self._results[position] = result
            if result.status_code in RETRIED_ITEM_STATUSES:
                again.append(position)
        self._unsettled = again

    def results(self) -> list[BatchResult]:
        """Every item's latest result, in order (a 409 or 503 one when retries ran out)."""
        missing = [self._items[p].idempotency_key for p, r in enumerate(self._results) if not r]
        if missing:
            raise ValueError(f"no result yet for the items with keys {missing[:3]}")
        return [result for result in self._results if result is not None]
