"""Judging a run: the acknowledged notifications against both models and the provider's record.

A run passes when every acknowledged notification is in Redis and PostgreSQL with every
delivery final, both models agree field by field and with what the directives asked for,
nothing exists that was not acknowledged, each SENT delivery was sent exactly once (with an
idempotent provider: one call that was not a repeat), every repeated send is explained by a
fault, and the dead-letter queue holds exactly the deliveries told to fail.

A repeated send is *explained* when the delivery was in flight at a fault that can cut a
delivery off (a worker SIGKILL or SIGSTOP, a Redis crash): its previous send was recorded by
the provider at most ``OUTCOME_DELAY_S`` before the fault began, while it lasted, or — for a
fault that lasts, a pause or a Redis restart — at most ``OUTCOME_DELAY_S`` after it ended,
and the repeat came after it began. What a lasting fault held up finishes just after it: a
resumed worker's client timeouts fire on calls Redis had already answered, and another
worker's takeover of its expired leases lands. A worker records the outcome a moment after
the provider's answer (one pipelined script call), so a send followed by a repeat without
such a fault right after it means the outcome was lost or ignored: a bug.
``OUTCOME_DELAY_S`` is far shorter than the lease, which matters: with a worker killed
every few seconds, a window of a whole lease before every fault would cover almost the
whole run and explain anything.

The Redis faults the service must heal from by itself add checks of their own: no POISON
anywhere, no process exited or restarted, readiness and ingest answering 503 while Redis is
out of memory (and readiness 200 soon after), and, after an empty restart, a verdict on the
notifications made after it only (``made_after``, ``evidence.made_since``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from tests.chaos.evidence import FINAL, DeliveryState, Evidence, SandboxCall, minted_at
from tests.chaos.faults import Crash, Fault
from tests.chaos.load import Acknowledged, Answer, ProducerStats
from tests.chaos.redis_faults import Reading

# Clock slack between the suite's timestamps and Redis's stream ids (same host).
SLACK_S = 0.2
# The longest a worker may take, on a loaded machine, from the provider's answer to the
# recorded outcome; a send recorded earlier than this before a fault was no longer in flight.
OUTCOME_DELAY_S = 2.0
SHOWN = 5  # examples listed per problem
# How soon readiness must answer 200 again once Redis takes writes again.
READY_AGAIN_S = 10.0


@dataclass(frozen=True, slots=True)
class Expected:
    channel: str
    state: DeliveryState  # only status and error_class are predicted


@dataclass(frozen=True, slots=True)
class Repeat:
    delivery_id: str
    at: float
    explained_by: Fault | None
    previous_at: float  # the provider's record of the send before it


@dataclass(slots=True)
class Verdict:
    idempotent: bool
    acknowledged: int = 0
    deliveries: int = 0
    final_agreeing: int = 0
    expected_sends: int = 0
    # Deliveries the recipient got once, and more than once: with an idempotent provider a
    # repeated call sends nothing, without one it sends again.
    sent_once: int = 0
    sent_more: int = 0
    repeats: list[Repeat] = field(default_factory=list)
    dlq_expected: int = 0
    dlq_found: int = 0
    lost: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=dict)

    def problem(self, kind: str, example: str) -> None:
        self.problems.setdefault(kind, []).append(example)

    def failures(self) -> list[str]:
        """One line per kind of problem, with a few examples."""
        return [
            f"{kind}: {len(examples)} (e.g. {'; '.join(examples[:SHOWN])})"
            for kind, examples in self.problems.items()
        ]


def expectations(acknowledged: dict[str, Acknowledged]) -> dict[str, Expected]:
    """Each acknowledged delivery's predicted final status (and error class)."""
    expected: dict[str, Expected] = {}
    for ack in acknowledged.values():
        for delivery_id, channel, status in ack.deliveries:
            if status in FINAL:  # suppressed or expired at acceptance: stays so
                state = DeliveryState(status, 0, None, None)
            elif ack.planned.expected[channel] == "SENT":
                state = DeliveryState("SENT", 0, None, None)
            else:
                state = DeliveryState("FAILED", 0, ack.planned.expected[channel], None)
            expected[delivery_id] = Expected(channel, state)
    return expected


def judge(
    acknowledged: dict[str, Acknowledged],
    evidence: Evidence,
    faults: list[Fault],
    crashes: list[Crash],
    stats: ProducerStats,
    *,
    idempotent: bool,
) -> Verdict:
    verdict = Verdict(idempotent, acknowledged=len(acknowledged))
    expected = expectations(acknowledged)
    verdict.deliveries = len(expected)
    _notifications(verdict, acknowledged, evidence)
    _states(verdict, expected, evidence)
    _sends(verdict, expected, evidence, faults)
    _dead_letters(verdict, expected, evidence)
    for stream, count in evidence.pending.items():
        if count:
            verdict.problem("entries never acknowledged", f"{stream}: {count}")
    if evidence.delayed:
        verdict.problem("retries still waiting in delayed", str(evidence.delayed))
    for crash in crashes:
        verdict.problem("process crashed", f"{crash.name} exit {crash.exit_code}")
    for key in stats.gave_up:
        verdict.problem("never acknowledged (producer gave up)", key)
    for answer in stats.unexpected:
        verdict.problem("unexpected answer", answer)
    return verdict


def _notifications(
    verdict: Verdict, acknowledged: dict[str, Acknowledged], evidence: Evidence
) -> None:
    """None lost, none extra, one id per key, the record as the 202 described it."""
    ids = {ack.notification_id for ack in acknowledged.values()}
    for key, ack in acknowledged.items():
        nid = ack.notification_id
        if nid not in evidence.records or nid not in evidence.pg_notifications:
            verdict.lost.append(nid)
            continue
        if evidence.idempotency.get(key) != nid:
            verdict.problem("key maps to another id", f"{key}: {evidence.idempotency.get(key)}")
        if evidence.pg_notifications[nid] != key:
            verdict.problem("PostgreSQL has another key", f"{nid}")
        answered = [(d, c) for d, c, _ in ack.deliveries]
        if [(d, c) for d, c, _ in evidence.records[nid]] != answered:
            verdict.problem("record differs from the 202 answer", nid)
    verdict.extra += sorted((set(evidence.records) | set(evidence.pg_notifications)) - ids)
    verdict.extra += [f"key {k}" for k in sorted(set(evidence.idempotency) - set(acknowledged))]
    for nid in verdict.lost:
        verdict.problem("acknowledged notification lost", nid)
    for what in verdict.extra:
        verdict.problem("notification that was never acknowledged", what)


def _states(verdict: Verdict, expected: dict[str, Expected], evidence: Evidence) -> None:
    """Every delivery final, in both models alike, and as its directives predicted."""
    for delivery_id, want in expected.items():
        redis = evidence.redis_states.get(delivery_id)
        pg = evidence.pg_states.get(delivery_id)
        if redis is None or pg is None:
            verdict.problem("delivery missing", f"{delivery_id} redis={redis} pg={pg}")
        elif redis.status not in FINAL:
            verdict.problem("delivery not final", f"{delivery_id}: {redis.status}")
        elif pg != redis:
            verdict.problem("PostgreSQL disagrees with Redis", f"{delivery_id}: {pg} != {redis}")
        elif (redis.status, redis.error_class if redis.status == "FAILED" else None) != (
            want.state.status,
            want.state.error_class,
        ):
            verdict.problem(
                "not what the directives asked for",
                f"{delivery_id} ({want.channel}): {redis.status}/{redis.error_class}, "
                f"expected {want.state.status}/{want.state.error_class}",
            )
        else:
            verdict.final_agreeing += 1
    unknown = (set(evidence.pg_states) | evidence.state_hashes) - set(expected)
    for delivery_id in sorted(unknown):
        verdict.problem("delivery that was never acknowledged", delivery_id)


def _sends(
    verdict: Verdict,
    expected: dict[str, Expected],
    evidence: Evidence,
    faults: list[Fault],
) -> None:
    """Exactly one real send per SENT delivery; every repeat explained by a fault."""
    interrupting = [fault for fault in faults if fault.interrupts_delivery]
    for delivery_id in sorted(set(evidence.sandbox) - set(expected)):
        verdict.problem("provider call for an unknown delivery", delivery_id)
    for delivery_id, want in expected.items():
        sends = [c for c in evidence.sandbox.get(delivery_id, []) if c.outcome == "sent"]
        state = evidence.redis_states.get(delivery_id)
        if want.state.status != "SENT" or state is None:
            if sends:
                verdict.problem("sent but did not end SENT", delivery_id)
            continue
        verdict.expected_sends += 1
        originals = [c for c in sends if not c.duplicate]
        if len(originals) != 1 or sends[0].duplicate:
            verdict.problem("not one first send", f"{delivery_id}: {len(originals)}")
        received = len(originals) if verdict.idempotent else len(sends)
        if received == 1:
            verdict.sent_once += 1
        elif received > 1:
            verdict.sent_more += 1
        if state.provider_message_id not in {c.message_id for c in sends}:
            verdict.problem("recorded message id is no send's", delivery_id)
        for previous, repeat in itertools.pairwise(sends):
            cause = _explanation(previous, repeat, interrupting)
            verdict.repeats.append(Repeat(delivery_id, repeat.at, cause, previous.at))
            if cause is None:
                verdict.problem("repeated send without a fault to explain it", delivery_id)


def _explanation(previous: SandboxCall, repeat: SandboxCall, faults: list[Fault]) -> Fault | None:
    for fault in faults:
        # A kill ends when it happens; a pause or a Redis crash lasts, and has an aftermath.
        aftermath = OUTCOME_DELAY_S if fault.end - fault.start > SLACK_S else 0.0
        earliest = fault.start - OUTCOME_DELAY_S - SLACK_S
        in_flight = earliest <= previous.at <= fault.end + aftermath + SLACK_S
        if in_flight and repeat.at >= fault.start - SLACK_S:
            return fault
    return None


def _dead_letters(verdict: Verdict, expected: dict[str, Expected], evidence: Evidence) -> None:
    """The dead-letter queue holds exactly the deliveries told to fail, once each."""
    wanted = {d: e.state.error_class for d, e in expected.items() if e.state.status == "FAILED"}
    found = Counter(delivery_id for delivery_id, _ in evidence.dead_letters)
    verdict.dlq_expected, verdict.dlq_found = len(wanted), len(evidence.dead_letters)
    for delivery_id, error_class in evidence.dead_letters:
        if delivery_id not in wanted:
            verdict.problem("dead letter nobody asked for", f"{delivery_id or '?'} {error_class}")
        elif wanted[delivery_id] != error_class:
            verdict.problem("dead letter of another class", f"{delivery_id} {error_class}")
    for delivery_id in sorted(set(wanted) - set(found)):
        verdict.problem("dead letter missing", delivery_id)
    for delivery_id, count in found.items():
        if count > 1:
            verdict.problem("dead-lettered more than once", f"{delivery_id} x{count}")


def no_poison(verdict: Verdict, evidence: Evidence) -> None:
    """No delivery ended POISON, in either model, and no dead letter is POISON."""
    states = (*evidence.redis_states.items(), *evidence.pg_states.items())
    for delivery_id in sorted({d for d, state in states if state.error_class == "POISON"}):
        verdict.problem("POISON delivery", delivery_id)
    for delivery_id, error_class in evidence.dead_letters:
        if error_class == "POISON":
            verdict.problem("POISON dead letter", delivery_id or "?")


def no_restarts(verdict: Verdict, replaced: list[str]) -> None:
    """Every process the run began with still runs, and none was added."""
    for change in replaced:
        verdict.problem("process exited or restarted", change)


def judge_out_of_memory(
    verdict: Verdict,
    episode: Fault,
    readings: list[Reading],
    timeline: list[Answer],
    lapses: int,
) -> list[str]:
    """Readiness 503 throughout the episode and 200 soon after it, ingest refused meanwhile;
    the problems go into the verdict, the lines returned say what was seen."""
    if lapses:
        verdict.problem("the OOM lapsed (Redis took a probe write)", f"{lapses} times")
    return [*_readiness_around(verdict, episode, readings), _ingest_in(verdict, episode, timeline)]


def _readiness_around(verdict: Verdict, episode: Fault, readings: list[Reading]) -> list[str]:
    during = [r for r in readings if r.sent >= episode.start and r.answered <= episode.end]
    answered = [r for r in during if r.status is not None]
    for r in answered:
        if r.status != 503 or not r.redis.startswith("refuses writes"):
            when = f"{r.sent - episode.start:.1f} s in"
            verdict.problem("readiness not 503 during the OOM", f"{when}: {r.status} {r.redis}")
    if not answered:
        verdict.problem("readiness never answered during the OOM", f"{len(during)} tries")
    after = [r for r in readings if r.sent >= episode.end]
    again = next((r for r in after if r.status == 200), None)
    delay = None if again is None else again.answered - episode.end
    if delay is None or delay > READY_AGAIN_S:
        verdict.problem("readiness not 200 soon after the OOM", f"after {delay} s")
    last = after[-1].status if after else None
    if last != 200:
        verdict.problem("readiness not 200 at the end", str(last))
    statuses = Counter(r.status for r in answered)
    said = ", ".join(Counter(r.redis for r in answered)) or "-"
    again_text = "never" if delay is None else f"{delay:.1f} s after the limit was restored"
    return [
        f"readiness during the OOM: {len(during)} polls ({_counts(statuses)}; no answer: "
        f"{len(during) - len(answered)}); redis check: {said}",
        f"readiness after it: 200 again {again_text}; at the end: {last}",
    ]


def _ingest_in(verdict: Verdict, episode: Fault, timeline: list[Answer]) -> str:
    ingest = [a for a in timeline if a.sent >= episode.start and a.answered <= episode.end]
    answers = Counter(a.status for a in ingest)
    accepted = sum(1 for a in ingest if a.status == 202 and not a.replayed)
    if not answers[503]:
        verdict.problem("ingest never answered 503 during the OOM", _counts(answers))
    if accepted:
        verdict.problem("a new notification accepted during the OOM", str(accepted))
    return f"ingest during the OOM: {_counts(answers)}; new notifications accepted: {accepted}"


def _counts(counter: Mapping[int, int] | Mapping[int | None, int]) -> str:
    return ", ".join(f"{key}: {n}" for key, n in sorted(counter.items(), key=str)) or "-"


def made_after(
    acknowledged: dict[str, Acknowledged], since: float
) -> tuple[dict[str, Acknowledged], dict[str, Acknowledged]]:
    """The acknowledged notifications made at ``since`` or later, and those made before.

    After Redis lost its dataset at ``since``, a notification whose id is younger can only
    have been written into the new, empty one; an older one may have been written into the
    lost one, even when its 202 came later (in flight across the restart)."""
    after = {k: a for k, a in acknowledged.items() if minted_at(a.notification_id) >= since}
    before = {k: a for k, a in acknowledged.items() if k not in after}
    return after, before
