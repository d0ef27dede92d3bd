"""A local Clarion for the Python client's retry tests: the producer API's answers, with the
failures the real one gives only under load or outage, on demand.

It checks ``Authorization: Bearer <key>`` (401 otherwise) and, on ``POST /v1/notifications``,
an ``Idempotency-Key`` (400 without), as Clarion does, and answers as Clarion does: 202 with
``{"id", "deliveries"}``, the id following from the key (the same key, the same id); a batch
200 with one result per item, in order; errors as ``{"status_code", "detail"}``. Every request
it read is kept in ``seen``.

Failures: ``answer_next(429, detail, retry_after="1", times=2)`` answers the next requests
with that error (and ``Retry-After``, when given), whatever they are; ``item_statuses[key]``
the statuses a batch item with that key gets, one per time it is sent (then 202). The faults
of ``tests.peers.serving`` (``fail``) answer in Clarion's error shape too.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.peers.serving import Answer, Fault, HttpPeer, Request

NOTIFICATIONS = "/v1/notifications"
BATCH = "/v1/notifications/batch"
AUTH_DETAIL = "Authorization: a valid 'Bearer <api key>' header is required"


def error(status: int, detail: str, **headers: str) -> Answer:
    """An error in Clarion's shape."""
    return Answer.json(status, {"status_code": status, "detail": detail}, **headers)


def accepted(key: str) -> dict[str, Any]:
    """The 202 body for ``key``: the same key, the same notification id."""
    notification = str(uuid.uuid5(uuid.NAMESPACE_URL, key))
    return {"id": notification, "deliveries": [{"id": notification, "channel": "SMS",
                                                "status": "QUEUED"}]}  # fmt: skip


class ClarionPeer(HttpPeer):
    def __init__(self, api_key: str) -> None:
        super().__init__()
        self.api_key = api_key
        self.seen: list[Request] = []
        self.item_statuses: dict[str, list[int]] = {}
        self._next: list[Answer] = []

    def answer_next(
        self, status: int, detail: str, *, retry_after: str | None = None, times: int = 1
    ) -> None:
        """Answer the next ``times`` requests with this error, before any other answer."""
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        self._next += [error(status, detail, **headers)] * times

    def keys(self) -> list[str | None]:
        """The ``Idempotency-Key`` of each request seen, in order."""
        return [request.headers.get("idempotency-key") for request in self.seen]

    async def handle(self, request: Request) -> Answer:
        self.seen.append(request)
        if self._next:
            return self._next.pop(0)
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return error(401, AUTH_DETAIL, **{"www-authenticate": 'Bearer realm="clarion"'})
        if request.method == "POST" and request.path == NOTIFICATIONS:
            key = request.headers.get("idempotency-key")
            if not key:
                return error(400, "Idempotency-Key: header is required")
            self.accepted.append(key)
            return Answer.json(202, accepted(key))
        if request.method == "POST" and request.path == BATCH:
            items = json.loads(request.body)["notifications"]
            return Answer.json(200, {"results": [self._item(item) for item in items]})
        return error(404, "No such resource, or one of another producer")

    def _item(self, item: dict[str, Any]) -> dict[str, Any]:
        key = item["idempotency_key"]
        statuses = self.item_statuses.get(key)
        if statuses:
            status = statuses.pop(0)
            return {"idempotency_key": key, "status_code": status, "detail": f"status {status}"}
        self.accepted.append(key)
        return {"idempotency_key": key, "status_code": 202, **accepted(key)}

    def fault_answer(self, fault: Fault) -> Answer:
        headers = {"retry-after": self.retry_after} if self.retry_after is not None else {}
        status = int(fault.value) if fault is not Fault.HANG else 504
        return error(status, f"scripted {status}", **headers)
