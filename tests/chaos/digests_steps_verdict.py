"""Judging the digests-and-steps run (``digests_steps``) by what it left behind
(``digests_steps_evidence``).

Digests, each digest id a 202 named:

- its items are the notifications that joined it, less those whose cancellation was answered
  CANCELLED (they left it); those answered DIGESTED (it was sealed already) stay in it;
- with items, exactly one notification was made of it (idempotency key ``digest:<id>``),
  each of its deliveries SENT, one first send per delivery in the sandbox (EMAIL, PUSH) and
  one message in the inbox (IN_APP) whose ``count`` is the number of its items and whose
  ``items`` are exactly them; without items, none was made;
- no joined notification is in two digests' messages, or in none while it was not cancelled;
  the sandbox took as many first sends per recipient and channel as it has digests with items;
- every joined notification ends DIGESTED (CANCELLED when it left), naming its digest.

Escalation steps, each ``escalating`` notification:

- read (its read acknowledged): IN_APP READ; no PUSH or EMAIL reached the sandbox after the
  read's 200; each ended SKIPPED (reason ``read``) or SENT before the read;
- unread: IN_APP SENT, every PUSH and the EMAIL SENT, each with exactly one first send, or
  SKIPPED for a recorded reason other than ``read``; none before its step's time;
- a PUSH the sandbox refused (invalid token): FAILED, and exactly one SMS with
  ``fallback_of`` naming one of its PUSH deliveries, SENT once, for the whole notification;
  no other notification has an SMS.

Besides: every repeated provider call is explained by a fault (as in ``verdict``), nothing
is pending, waiting or dead-lettered, no notification exists that was neither acknowledged
nor made of a digest, and no process crashed.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.digests_steps import (
    DIGEST_CHANNELS,
    DIGEST_TYPE,
    SANDBOX_DIGEST_CHANNELS,
    DigestStepsProducer,
)
from tests.chaos.digests_steps_evidence import Found, Sent
from tests.chaos.faults import Crash, Fault
from tests.chaos.load import Acknowledged
from tests.chaos.verdict import Verdict, _explanation


@dataclass(slots=True)
class Tally:
    """What the report counts besides ``Verdict``'s rows."""

    digests: int = 0  # distinct digest ids the 202s named
    made: int = 0  # of them, with items: one notification each
    empty: int = 0  # every item cancelled: no notification
    joined: int = 0
    left: int = 0  # cancelled while their digest was open
    stayed: int = 0  # cancellation answered DIGESTED: sealed already
    read: int = 0
    skipped_by_read: int = 0
    sent_before_read: int = 0
    unread: int = 0
    fallbacks: int = 0
    repeats: int = 0
    by_fault: Counter[str] = field(default_factory=Counter)

    def notes(self) -> list[str]:
        causes = ", ".join(f"{k}: {n}" for k, n in sorted(self.by_fault.items())) or "none"
        return [
            f"digests opened {self.digests}: made once {self.made}, every item cancelled "
            f"{self.empty}; joined {self.joined}, left when cancelled {self.left}, "
            f"cancelled too late (stayed) {self.stayed}",
            f"steps: read {self.read} (PUSH/EMAIL skipped by the read {self.skipped_by_read}, "
            f"sent before it {self.sent_before_read}), unread {self.unread}, "
            f"SMS fallbacks {self.fallbacks}",
            f"repeated provider calls {self.repeats}, in flight at: {causes}",
        ]


def first_sends(
    verdict: Verdict, tally: Tally, sends: list[Sent], delivery_id: str, faults: list[Fault]
) -> int:
    """How many first (not duplicate) sends ``sends`` holds; every repeat must be explained
    by a fault that can cut a delivery off (``verdict``'s rule)."""
    interrupting = [fault for fault in faults if fault.interrupts_delivery]
    for previous, repeat in itertools.pairwise(sends):
        tally.repeats += 1
        cause = _explanation(previous.at, repeat.at, interrupting)
        if cause is None:
            verdict.problem("repeated send without a fault to explain it", delivery_id)
        else:
            tally.by_fault[f"{cause.target.split('-')[0]} {cause.kind}"] += 1
    return sum(1 for s in sends if not s.duplicate)


def _cancelled(producer: DigestStepsProducer, key: str) -> str | None:
    """What the cancellation of ``key`` was answered: CANCELLED, DIGESTED, or None."""
    answer = producer.cancels.get(key)
    if answer is None:
        return None
    statuses = set(answer.statuses.values())
    return statuses.pop() if len(statuses) == 1 else "mixed: " + ",".join(sorted(statuses))


def judge_digests(
    verdict: Verdict, tally: Tally, producer: DigestStepsProducer, found: Found, faults: list[Fault]
) -> None:
    members: dict[str, list[Acknowledged]] = defaultdict(list)
    for key, digest in producer.digests.items():
        members[digest].append(producer.acknowledged[key])
    tally.digests, tally.joined = len(members), len(producer.digests)
    placed: Counter[int] = Counter()  # item number -> in how many digest messages
    kept_items: set[int] = set()
    for digest, acks in members.items():
        kept = []
        for ack in acks:
            kept += _joined(verdict, tally, producer, found, ack, digest)
        kept_items |= set(kept)
        placed.update(_digest(verdict, tally, found, digest, sorted(kept), faults))
    for item, times in placed.items():
        if times > 1:
            verdict.problem("item in more than one digest message", str(item))
    for item in sorted(kept_items - set(placed)):
        verdict.problem("item lost: in no digest message", str(item))
    _per_address(verdict, producer, members, found)


def _joined(
    verdict: Verdict, tally: Tally, producer: DigestStepsProducer, found: Found,
    ack: Acknowledged, digest: str,
) -> list[int]:  # fmt: skip
    """Check one joined notification; its item number if it stays in ``digest``."""
    answered = _cancelled(producer, ack.planned.key)
    shown = found.status.get(ack.notification_id)
    if shown is None:
        verdict.problem("joined notification not in the status API", ack.notification_id)
        return []
    statuses = {d["status"] for d in shown["deliveries"]}
    left = answered == "CANCELLED"
    tally.left += left
    tally.stayed += answered == "DIGESTED"
    if answered not in (None, "CANCELLED", "DIGESTED"):
        verdict.problem("cancellation answered neither CANCELLED nor DIGESTED", f"{answered}")
    want = {"CANCELLED"} if left else {"DIGESTED"}
    if statuses != want:
        verdict.problem("joined notification ended otherwise", f"{ack.notification_id}: {statuses}")
    if shown.get("digest_id") != digest:
        verdict.problem("status names another digest", f"{ack.notification_id}: {digest}")
    return [] if left else [int(ack.planned.body["data"]["n"])]


def _digest(
    verdict: Verdict, tally: Tally, found: Found, digest: str, kept: list[int], faults: list[Fault]
) -> list[int]:
    """Check one digest, whose items should be ``kept``; the items its message listed."""
    made = sorted(found.made.get(digest, set()))
    row = found.digests.get(digest)
    if row is None or not row.closed:
        verdict.problem("digest not closed in the read model", digest)
    if not kept:
        tally.empty += 1
        if made:
            verdict.problem("notification made of a digest whose items all left", digest)
        return []
    if len(made) != 1:
        verdict.problem("digest made not exactly one notification", f"{digest}: {len(made)}")
        if not made:
            return []
    tally.made += 1
    [notification_id, *_] = made
    if row is not None and (row.items, row.notification_id) != (len(kept), notification_id):
        verdict.problem("read model's digest row differs", f"{digest}: {row}, {len(kept)}")
    shown = found.status.get(notification_id) or {"deliveries": []}
    if shown.get("made_of_digest") != digest:
        verdict.problem("digest's notification names another digest", notification_id)
    sends = found.sends()
    by_channel: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for delivery in shown["deliveries"]:
        by_channel[delivery["channel"]].append(delivery)
    if sorted(by_channel) != sorted(DIGEST_CHANNELS) or any(
        len(d) != 1 or d[0]["status"] != "SENT" for d in by_channel.values()
    ):
        verdict.problem("digest's deliveries not one SENT per channel", f"{notification_id}")
    for channel in SANDBOX_DIGEST_CHANNELS:
        for delivery in by_channel.get(channel, []):
            calls = sends.get(delivery["id"], [])
            firsts = first_sends(verdict, tally, calls, delivery["id"], faults)
            if firsts != 1:
                verdict.problem("digest not sent exactly once", f"{digest} {channel}: {firsts}")
    return _message(verdict, found, digest, notification_id, kept)


def _message(
    verdict: Verdict, found: Found, digest: str, notification_id: str, kept: list[int]
) -> list[int]:
    """The digest's inbox message: one, its count and items ``kept``; the items it listed."""
    messages = [
        m
        for inbox in found.inbox.values()
        for m in inbox
        if m["notification_id"] == notification_id
    ]
    if len(messages) != 1:
        verdict.problem("digest's inbox messages not exactly one", f"{digest}: {len(messages)}")
        if not messages:
            return []
    listed = [int(n) for n in messages[0]["body"].split(";") if n]
    if messages[0]["title"] != str(len(kept)):
        verdict.problem("digest's count is not its items'", f"{digest}: {messages[0]['title']}")
    if sorted(listed) != kept:
        lost, more = sorted(set(kept) - set(listed)), sorted(set(listed) - set(kept))
        verdict.problem("digest's items differ", f"{digest}: missing {lost}, extra {more}")
    if len(set(listed)) != len(listed):
        verdict.problem("digest lists an item twice", digest)
    return listed


def _per_address(
    verdict: Verdict,
    producer: DigestStepsProducer,
    members: dict[str, list[Acknowledged]],
    found: Found,
) -> None:
    """Each digest recipient's addresses took one first send per digest with items."""
    with_items: Counter[str] = Counter()
    for acks in members.values():
        if any(_cancelled(producer, a.planned.key) != "CANCELLED" for a in acks):
            with_items[acks[0].planned.body["recipient"]["id"]] += 1
    recipients = {
        a.planned.body["recipient"]["id"]: a.planned.body["recipient"]
        for a in producer.acknowledged.values()
        if a.planned.body["type"] == DIGEST_TYPE
    }
    firsts = Counter(
        (c.channel, c.address) for c in found.calls if c.outcome == "sent" and not c.duplicate
    )
    for recipient_id, recipient in recipients.items():
        for channel, address in (
            ("EMAIL", recipient["email"]),
            ("PUSH", recipient["push_tokens"][0]),
        ):
            got = firsts[(channel, address)]
            if got != with_items[recipient_id]:
                verdict.problem(
                    "digest recipient's sends differ from its digests",
                    f"{recipient_id} {channel}: {got} sent, {with_items[recipient_id]} digests",
                )


def judge_rest(
    verdict: Verdict,
    producer: DigestStepsProducer,
    found: Found,
    crashes: list[Crash],
    dead_letters: set[str],
) -> None:
    """What every chaos run checks: nothing extra, pending, waiting or crashed; nothing
    dead-lettered but ``dead_letters``, each once."""
    evidence = found.evidence
    known = {a.notification_id for a in producer.acknowledged.values()}
    known |= {n for ids in found.made.values() for n in ids}
    for extra in sorted((set(evidence.records) | set(evidence.pg_notifications)) - known):
        verdict.problem("notification neither acknowledged nor made of a digest", extra)
    for notification_id in sorted(known - set(found.status)):
        verdict.problem("notification missing from the status API", notification_id)
    deliveries = {d["id"] for shown in found.status.values() for d in shown["deliveries"]}
    for delivery_id in sorted({c.delivery_id for c in found.calls} - deliveries):
        verdict.problem("provider call for an unknown delivery", delivery_id)
    for delivery_id, state in evidence.redis_states.items():
        pg = evidence.pg_states.get(delivery_id)
        if pg != state:
            verdict.problem("PostgreSQL disagrees with Redis", f"{delivery_id}: {pg} != {state}")
    for stream, count in evidence.pending.items():
        if count:
            verdict.problem("entries never acknowledged", f"{stream}: {count}")
    if evidence.delayed:
        verdict.problem("still waiting in delayed", str(evidence.delayed))
    if found.digests_due:
        verdict.problem("digests still due", str(found.digests_due))
    for delivery_id, times in Counter(d for d, _ in evidence.dead_letters).items():
        if delivery_id not in dead_letters or times > 1:
            verdict.problem("dead letter nobody asked for", f"{delivery_id} x{times}")
    for crash in crashes:
        verdict.problem("process crashed", f"{crash.name} exit {crash.exit_code}")
    for key in producer.stats.gave_up:
        verdict.problem("never acknowledged (producer gave up)", key)
    for answer in producer.stats.unexpected:
        verdict.problem("unexpected answer", answer)
