"""Judging the escalation steps of the digests-and-steps run (what ``digests_steps_verdict``
says of them: no step after its read, every unread step once, one SMS per refused push)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from tests.chaos.digests_steps import STEPS_TYPE, DigestStepsProducer
from tests.chaos.digests_steps_evidence import Found, Sent
from tests.chaos.digests_steps_verdict import Tally, first_sends
from tests.chaos.faults import Fault
from tests.chaos.load import Acknowledged
from tests.chaos.verdict import Verdict

STEP_OF = {"IN_APP": 1, "PUSH": 2, "EMAIL": 3}
# Why a PUSH found its token dead before sending (the sandbox refused it on an earlier try).
REFUSED = frozenset({"invalid_address", "invalid_token"})


def judge_steps(
    verdict: Verdict, tally: Tally, producer: DigestStepsProducer, found: Found, faults: list[Fault]
) -> set[str]:
    """Judge every ``escalating`` notification; the deliveries that may be dead-lettered: a
    refused PUSH that does not carry its notification's fallback (only one of them does,
    ``streams.delivery.outcomes``), like any delivery failed for good."""
    dead_letters: set[str] = set()
    sends = found.sends()
    firsts_to = Counter(
        (c.channel, c.address) for c in found.calls if c.outcome == "sent" and not c.duplicate
    )
    for ack in producer.acknowledged.values():
        if ack.planned.body["type"] != STEPS_TYPE:
            continue
        shown = found.status.get(ack.notification_id)
        if shown is None:
            continue  # ``judge_rest`` names it
        by_channel: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for delivery in shown["deliveries"]:
            by_channel[delivery["channel"]].append(delivery)
        invalid = "sandbox" in ack.planned.body["data"]
        _in_app(verdict, tally, producer, ack, by_channel["IN_APP"])
        for channel in ("PUSH", "EMAIL"):
            for delivery in by_channel[channel]:
                if delivery["step"] != STEP_OF[channel]:
                    verdict.problem("step number differs", f"{delivery['id']}: {delivery['step']}")
                _step(
                    verdict, tally, producer, ack, delivery, sends.get(delivery["id"], []), faults
                )
        carrier = _fallback(verdict, tally, ack, by_channel, sends, faults, invalid=invalid)
        dead_letters |= {
            d["id"] for d in by_channel["PUSH"] if invalid and d["status"] == "FAILED"
        } - {carrier}
        phone = ack.planned.body["recipient"]["phone"]
        if firsts_to[("SMS", phone)] != int(invalid):
            verdict.problem("SMS sent to a recipient not once per refused push",
                            f"{ack.notification_id}: {firsts_to[('SMS', phone)]}")  # fmt: skip
    return dead_letters


def _in_app(
    verdict: Verdict, tally: Tally, producer: DigestStepsProducer, ack: Acknowledged,
    deliveries: list[dict[str, Any]],
) -> None:  # fmt: skip
    key = ack.planned.key
    read = key in producer.reads
    tally.read += read
    tally.unread += not read and key not in producer.read_unknown
    want = {"READ"} if read else {"SENT", "READ"} if key in producer.read_unknown else {"SENT"}
    if len(deliveries) != 1 or deliveries[0]["status"] not in want:
        found = [d["status"] for d in deliveries]
        verdict.problem("IN_APP step ended otherwise", f"{ack.notification_id}: {found} {want}")
    elif deliveries[0]["step"] != 1:
        verdict.problem("step number differs", f"{deliveries[0]['id']}: {deliveries[0]['step']}")


def _step(
    verdict: Verdict, tally: Tally, producer: DigestStepsProducer, ack: Acknowledged,
    delivery: dict[str, Any], sends: list[Sent], faults: list[Fault],
) -> None:  # fmt: skip
    """One PUSH or EMAIL step: nothing after its read, sent once or skipped for a reason."""
    key, delivery_id, status = ack.planned.key, delivery["id"], delivery["status"]
    read_at = producer.reads.get(key)
    maybe_read = read_at is not None or key in producer.read_unknown
    if read_at is not None:
        for late in [s for s in sends if s.at > read_at]:
            verdict.problem(
                "step sent after its read was acknowledged",
                f"{delivery_id} ({delivery['channel']}): read {read_at:.3f}, sent {late.at:.3f}",
            )
    if status == "SENT":
        firsts = first_sends(verdict, tally, sends, delivery_id, faults)
        if firsts != 1:
            verdict.problem("step not sent exactly once", f"{delivery_id}: {firsts}")
        tally.sent_before_read += read_at is not None
    elif status == "SKIPPED":
        reason = delivery.get("reason")
        if not reason or (reason == "read" and not maybe_read):
            verdict.problem("step SKIPPED without a reason that held", f"{delivery_id}: {reason}")
        if sends:
            verdict.problem("step SKIPPED but sent", delivery_id)
        tally.skipped_by_read += reason == "read"
    elif (
        status == "FAILED"
        and delivery["channel"] == "PUSH"
        and "sandbox" in ack.planned.body["data"]
    ):
        if sends:
            verdict.problem("refused push recorded as sent", delivery_id)
    else:
        verdict.problem("step ended otherwise", f"{delivery_id} ({delivery['channel']}): {status}")


def _fallback(
    verdict: Verdict, tally: Tally, ack: Acknowledged, by_channel: dict[str, list[dict[str, Any]]],
    sends: dict[str, list[Sent]], faults: list[Fault], *, invalid: bool,
) -> str:  # fmt: skip
    """A notification whose pushes were refused has exactly one SMS, SENT once; others none.
    The PUSH delivery the SMS replaced ("" for none)."""
    sms = by_channel["SMS"]
    pushes = {d["id"] for d in by_channel["PUSH"]}
    if not invalid:
        if sms:
            verdict.problem("SMS for a notification whose pushes went", ack.notification_id)
        return ""
    if any(d["status"] not in ("FAILED", "SUPPRESSED") for d in by_channel["PUSH"]):
        verdict.problem(
            "push to an invalid token neither FAILED nor SUPPRESSED", ack.notification_id
        )
    if len(sms) != 1:
        verdict.problem(
            "refused pushes made not exactly one SMS", f"{ack.notification_id}: {len(sms)}"
        )
        if not sms:
            return ""
    tally.fallbacks += 1
    fallback = sms[0]
    if fallback["fallback_of"] not in pushes:
        verdict.problem("SMS names no PUSH of its notification", fallback["id"])
    if fallback["status"] != "SENT":
        verdict.problem("SMS fallback not SENT", f"{fallback['id']}: {fallback['status']}")
    firsts = first_sends(verdict, tally, sends.get(fallback["id"], []), fallback["id"], faults)
    if firsts != 1:
        verdict.problem("SMS fallback not sent exactly once", f"{fallback['id']}: {firsts}")
    return str(fallback["fallback_of"])
