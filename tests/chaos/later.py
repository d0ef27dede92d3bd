"""The chaos run with time in it: notifications sent later, some of them cancelled, and a
type capped per recipient, all under the same faults.

- A quarter of the notifications go with a ``delay`` of 2 to 15 s (a few more with 30 to 60 s,
  to be cancelled): none may reach a provider before its due time.
- Of those, the ones planned for it are cancelled 0 to 1 s after their 202, the cancellation
  retried like a send until it is answered 200. A delivery the answer calls CANCELLED must
  never reach a provider (0 sent after the cancellation was acknowledged) and must end
  CANCELLED; one it calls SENDING was with a worker at that moment and may end as its
  directives say or CANCELLED.
- ``marketing`` goes to a small pool of recipients and is capped at ``CAP`` per recipient and
  channel per hour (``action = "suppress"``): no recipient gets more than the cap on a
  channel, and every marketing delivery ends as its directives say or SUPPRESSED.

``resolve`` turns these into the expectations ``verdict.judge`` checks, given what was found;
``judge_later`` adds the checks of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import defaultdict
from dataclasses import dataclass, replace

import httpx

from tests.chaos.evidence import DeliveryState, Evidence
from tests.chaos.load import Planned, Producer, plan
from tests.chaos.relay import RELAY_CHANNEL
from tests.chaos.verdict import SLACK_S, Expected, Verdict, expectations

LATER = 0.25  # the share sent later
CANCELLED = 0.08  # the share sent with a long delay and cancelled
FANS = 100  # marketing's recipients
CAP = 2  # marketing per recipient and channel per hour
CAPPED_TYPE = "marketing"
_CANCELLED = DeliveryState("CANCELLED", 0, None, None)
THROTTLE = (
    f'throttle = {{ limit = {CAP}, per = "1h", channels = ["EMAIL", "PUSH"], action = "suppress" }}'
)


def with_throttle(catalog: str) -> str:
    """The chaos catalog with ``marketing`` capped."""
    header = f"[types.{CAPPED_TYPE}]\n"
    assert header in catalog, "clarion.toml changed: update this helper"
    return catalog.replace(header, f"{header}{THROTTLE}\n", 1)


@dataclass(frozen=True, slots=True)
class LaterPlan:
    plans: list[Planned]
    cancel: frozenset[str]  # idempotency keys of the notifications to cancel


def plan_later(count: int, seed: int) -> LaterPlan:
    """``plan``'s mix, with send times, cancellations and marketing to a few recipients."""
    rng = random.Random(seed * 31)
    plans = plan(count, seed)
    cancel: set[str] = set()
    for planned in plans:
        body = planned.body
        if body["type"] == CAPPED_TYPE:
            body["recipient"]["id"] = f"fan-{rng.randrange(FANS)}"
        roll = rng.random()
        if roll < CANCELLED:
            body["delay"] = rng.randrange(30, 60)
            cancel.add(planned.key)
        elif roll < LATER:
            body["delay"] = round(rng.uniform(2, 15), 3)
    return LaterPlan(plans, frozenset(cancel))


@dataclass(frozen=True, slots=True)
class CancelAnswer:
    answered: float  # when the 200 came (seconds since the epoch)
    statuses: dict[str, str]  # delivery id -> its status after the cancellation


class LaterProducer(Producer):
    """``Producer``, which also cancels the notifications planned for it after their 202."""

    def __init__(self, base_url: str, api_key: str, cancel: frozenset[str]) -> None:
        super().__init__(base_url, api_key)
        self.cancel = cancel
        self.cancels: dict[str, CancelAnswer] = {}
        self.due_ms: dict[str, int] = {}  # delivery id -> its send time
        self.cancel_failures: list[str] = []
        self._rng = random.Random(11)

    async def _send_until_answered(self, client: httpx.AsyncClient, planned: Planned) -> None:
        await super()._send_until_answered(client, planned)
        ack = self.acknowledged.get(planned.key)
        if ack is None or planned.key not in self.cancel:
            return
        await asyncio.sleep(self._rng.uniform(0, 1))
        await self._cancel_until_answered(client, planned.key, ack.notification_id)

    def _remember(self, planned: Planned, answer: httpx.Response) -> None:
        super()._remember(planned, answer)
        for delivery in answer.json()["deliveries"]:
            if delivery.get("due_ms"):
                self.due_ms[delivery["id"]] = delivery["due_ms"]

    async def _cancel_until_answered(
        self, client: httpx.AsyncClient, key: str, notification_id: str
    ) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        path = f"/v1/notifications/{notification_id}/cancel"
        deadline = time.monotonic() + 180
        for attempt in itertools.count():
            if time.monotonic() > deadline:
                self.cancel_failures.append(f"{key}: never answered")
                return
            if attempt:
                await asyncio.sleep(0.5)
            try:
                answer = await client.post(path, headers=headers)
            except httpx.TransportError:
                continue
            if answer.status_code == 200:
                statuses = {d["id"]: d["status"] for d in answer.json()["deliveries"]}
                self.cancels[key] = CancelAnswer(time.time(), statuses)
                return
            if answer.status_code != 503:
                self.cancel_failures.append(f"{key}: {answer.status_code} {answer.text[:200]}")
                return


def resolve(
    producer: LaterProducer, evidence: Evidence
) -> tuple[dict[str, Expected], dict[str, str]]:
    """Each delivery's expected end, given the cancellations' answers and the cap; and the
    status each cancellation answered, by delivery id."""
    expected = expectations(producer.acknowledged)
    answered: dict[str, str] = {}
    for cancelled in producer.cancels.values():
        answered |= cancelled.statuses
    for ack in producer.acknowledged.values():
        capped = ack.planned.body["type"] == CAPPED_TYPE
        for delivery_id, _, _ in ack.deliveries:
            want = expected[delivery_id]
            found = evidence.redis_states.get(delivery_id) or evidence.pg_states.get(delivery_id)
            said = answered.get(delivery_id)
            if said == "CANCELLED":
                expected[delivery_id] = replace(want, state=_CANCELLED)
            elif found is not None and (
                (said == "SENDING" and found.status == "CANCELLED")
                or (capped and found.status == "SUPPRESSED")
            ):
                # With a worker when cancelled, or refused by the cap: as it ended.
                expected[delivery_id] = replace(want, state=found)
    return expected, answered


def judge_later(
    verdict: Verdict,
    producer: LaterProducer,
    evidence: Evidence,
    answered: dict[str, str],
) -> None:
    """What sending later, cancelling and capping add to the verdict."""
    for failure in producer.cancel_failures:
        verdict.problem("cancellation not answered", failure)
    sends = _provider_sends(evidence)
    for delivery_id, status in answered.items():
        if status == "CANCELLED" and sends.get(delivery_id):
            verdict.problem("sent after its cancellation was acknowledged", delivery_id)
    for delivery_id, due_ms in producer.due_ms.items():
        first = min(sends.get(delivery_id, []), default=None)
        if first is not None and first < due_ms / 1000 - SLACK_S:
            verdict.problem("sent before its time", f"{delivery_id}: {due_ms / 1000 - first:.2f} s")
    per_fan: dict[tuple[str, str], set[str]] = defaultdict(set)
    for ack in producer.acknowledged.values():
        if ack.planned.body["type"] != CAPPED_TYPE:
            continue
        recipient = ack.planned.body["recipient"]["id"]
        for delivery_id, channel, _ in ack.deliveries:
            if sends.get(delivery_id):
                per_fan[(recipient, channel)].add(delivery_id)
    for (recipient, channel), delivered in per_fan.items():
        if len(delivered) > CAP:
            verdict.problem("sent beyond a cap", f"{recipient} {channel}: {len(delivered)}")


def _provider_sends(evidence: Evidence) -> dict[str, list[float]]:
    """When each delivery reached a provider: the sandbox's sends and the relay's copies."""
    sends: dict[str, list[float]] = defaultdict(list)
    for delivery_id, calls in evidence.sandbox.items():
        sends[delivery_id] += [call.at for call in calls if call.outcome == "sent"]
    for delivery_id, copies in evidence.relay.items():
        sends[delivery_id] += [copy.at for copy in copies]
    return sends


def summary(producer: LaterProducer, answered: dict[str, str], evidence: Evidence) -> str:
    """One line for the report: how much of the traffic was of each kind."""
    cancelled = sum(1 for status in answered.values() if status == "CANCELLED")
    suppressed = sum(
        1
        for ack in producer.acknowledged.values()
        if ack.planned.body["type"] == CAPPED_TYPE
        for delivery_id, _, _ in ack.deliveries
        if (s := evidence.redis_states.get(delivery_id)) is not None and s.status == "SUPPRESSED"
    )
    return (
        f"sent later: {len(producer.due_ms)} deliveries; cancelled: {len(producer.cancels)} "
        f"notifications, {cancelled} deliveries CANCELLED; capped type suppressed: {suppressed}"
        f" ({RELAY_CHANNEL} via the relay)"
    )
