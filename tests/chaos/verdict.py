"""Judging a run: the acknowledged notifications against both models and the provider's record.

A run passes when every acknowledged notification is in Redis and PostgreSQL with every
delivery final, both models agree field by field and with what the directives asked for,
nothing exists that was not acknowledged, each SENT delivery was sent exactly once (with an
idempotent provider: one call that was not a repeat), every repeated send is explained by a
fault, and the dead-letter queue holds exactly the deliveries told to fail.

The EMAIL channel goes through the SMTP relay instead (``relay``), which is judged by what
it took: every EMAIL delivery that ended SENT was received, under the Message-ID the state
records (``<delivery id@domain>``) and for its recipient; none that ended otherwise was.
SMTP has no idempotency key, so a copy taken again is a duplicate the recipient's mail
system sees: at least once. Each is counted, must carry its original's Message-ID (which
lets a mail system drop it) and must be explained by a fault, as a repeated send is.

A repeated send is *explained* when the delivery was in flight at a fault that can cut a
delivery off (a worker SIGKILL or SIGSTOP, a Redis crash): its previous send was recorded by
the provider at most ``OUTCOME_DELAY_S`` before the fault began, while it lasted, or — for a
fault that lasts, a pause or a Redis restart — at most ``OUTCOME_DELAY_S`` after it ended,
and the repeat came after it began. What a lasting fault held up finishes just after it: a
resumed worker's client timeouts fire on calls Redis had already answered, and another
worker's takeover of its expired leases lands. A worker records the outcome a moment after
the provider's answer (one pipelined script call), so a send followed by a repeat without
such a fault right after it means the outcome was lost or ignored: a bug.
A kill has a short aftermath too (``WRITTEN_BEFORE_KILL_S``): a call the worker wrote before
it died is still carried out by whoever reads it. The sandbox's record is a script the worker
sent to Redis, and a Redis with ``appendfsync always`` blocks on its fsync between reads, so
on a busy disk it can run a dead worker's last call a few hundred milliseconds after the
kill (a CI run saw 0.3 s); a relay takes a message whose final dot arrived before the kill.
``OUTCOME_DELAY_S`` is far shorter than the lease, which matters: with a worker killed
every few seconds, a window of a whole lease before every fault would cover almost the
whole run and explain anything.

The Redis faults the service must heal from by itself add checks of their own
(``redis_verdict``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

from streams.delivery.state_release import RELEASED_ONCE_PROJECTED
from tests.chaos.evidence import FINAL, DeliveryState, Evidence
from tests.chaos.faults import Crash, Fault
from tests.chaos.load import Acknowledged, ProducerStats
from tests.chaos.relay import RELAY_CHANNEL

# Clock slack between the suite's timestamps and Redis's stream ids (same host).
SLACK_S = 0.2
# The longest a worker may take, on a loaded machine, from the provider's answer to the
# recorded outcome; a send recorded earlier than this before a fault was no longer in flight.
OUTCOME_DELAY_S = 2.0
# The longest a server may take to carry out a call a worker wrote just before it was killed.
WRITTEN_BEFORE_KILL_S = 1.0
SHOWN = 5  # examples listed per problem


@dataclass(frozen=True, slots=True)
class Expected:
    channel: str
    state: DeliveryState  # only status and error_class are predicted
    address: str = ""  # EMAIL: the recipient's address


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
    released: int = 0  # of them, judged by PostgreSQL alone (their state left Redis)
    expected_sends: int = 0
    # Deliveries the recipient got once, and more than once: with an idempotent provider a
    # repeated call sends nothing, without one it sends again.
    sent_once: int = 0
    sent_more: int = 0
    repeats: list[Repeat] = field(default_factory=list)
    # The relay: its channel's SENT deliveries, those it received (at least once), the
    # copies it took beyond the first, SENT ones it never received, others it received.
    relay_sent: int = 0
    relay_received: int = 0
    relay_repeats: list[Repeat] = field(default_factory=list)
    relay_lost: list[str] = field(default_factory=list)
    relay_not_sent: int = 0
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
            address = ack.planned.email if channel == RELAY_CHANNEL else ""
            expected[delivery_id] = Expected(channel, state, address)
    return expected


def judge(
    acknowledged: dict[str, Acknowledged],
    evidence: Evidence,
    faults: list[Fault],
    crashes: list[Crash],
    stats: ProducerStats,
    *,
    idempotent: bool,
    expected: dict[str, Expected] | None = None,
) -> Verdict:
    """The verdict on a run; ``expected``: each delivery's expected end, when not only the
    directives decide it (``later``)."""
    verdict = Verdict(idempotent, acknowledged=len(acknowledged))
    expected = expected if expected is not None else expectations(acknowledged)
    verdict.deliveries = len(expected)
    _notifications(verdict, acknowledged, evidence)
    _released(verdict, evidence)
    _states(verdict, expected, evidence)
    _sends(verdict, expected, evidence, faults)
    _relayed(verdict, expected, evidence, faults)
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


def _released(verdict: Verdict, evidence: Evidence) -> None:
    """A state that left Redis once projected is judged by the read model alone: it must
    have ended there for good (``streams.delivery.state_release``), and then stands for both."""
    for delivery_id in sorted(evidence.released):
        pg = evidence.pg_states.get(delivery_id)
        if pg is None or pg.status not in RELEASED_ONCE_PROJECTED:
            verdict.problem("state left Redis before its delivery ended", f"{delivery_id}: {pg}")
            continue
        evidence.redis_states[delivery_id] = pg
        verdict.released += 1


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
        if want.channel == RELAY_CHANNEL:
            if delivery_id in evidence.sandbox:
                verdict.problem("sandbox called for a delivery of the relay", delivery_id)
            continue
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
            cause = _explanation(previous.at, repeat.at, interrupting)
            verdict.repeats.append(Repeat(delivery_id, repeat.at, cause, previous.at))
            if cause is None:
                verdict.problem("repeated send without a fault to explain it", delivery_id)


def _explanation(previous_at: float, repeat_at: float, faults: list[Fault]) -> Fault | None:
    """The fault a send at ``previous_at`` was in flight at, if one was, and that came
    before the same delivery was sent again at ``repeat_at``."""
    for fault in faults:
        # A kill ends when it happens; a pause or a Redis crash lasts, and has an aftermath.
        lasting = fault.end - fault.start > SLACK_S
        aftermath = OUTCOME_DELAY_S if lasting else WRITTEN_BEFORE_KILL_S
        earliest = fault.start - OUTCOME_DELAY_S - SLACK_S
        in_flight = earliest <= previous_at <= fault.end + aftermath + SLACK_S
        if in_flight and repeat_at >= fault.start - SLACK_S:
            return fault
    return None


def _relayed(
    verdict: Verdict, expected: dict[str, Expected], evidence: Evidence, faults: list[Fault]
) -> None:
    """The relay took every SENT delivery of its channel, as recorded and for its recipient,
    and nothing else; every further copy has the same Message-ID and a fault to explain it."""
    interrupting = [fault for fault in faults if fault.interrupts_delivery]
    for delivery_id in sorted(set(evidence.relay) - set(expected)):
        verdict.problem("relay received an unknown delivery", delivery_id or "(no header)")
    for delivery_id, want in expected.items():
        if want.channel != RELAY_CHANNEL:
            continue
        copies = evidence.relay.get(delivery_id, [])
        state = evidence.redis_states.get(delivery_id)
        if state is None or state.status != "SENT":
            verdict.relay_not_sent += bool(copies)
            if copies:
                status = state.status if state else None
                verdict.problem("relay received what did not end SENT", f"{delivery_id}: {status}")
            continue
        verdict.relay_sent += 1
        if not copies:
            verdict.relay_lost.append(delivery_id)
            verdict.problem("SENT but never received by the relay", delivery_id)
            continue
        verdict.relay_received += 1
        first = copies[0]
        if first.message_id != state.provider_message_id:
            verdict.problem("recorded message id is not the relay's Message-ID", delivery_id)
        if not first.message_id.startswith(f"<{delivery_id}@"):
            verdict.problem("Message-ID not made of the delivery id", first.message_id)
        if any(copy.rcpt_tos != (want.address,) for copy in copies):
            verdict.problem("relay received it for another address", delivery_id)
        for previous, copy in itertools.pairwise(copies):
            if copy.message_id != first.message_id:
                verdict.problem("duplicate under another Message-ID", delivery_id)
            cause = _explanation(previous.at, copy.at, interrupting)
            verdict.relay_repeats.append(Repeat(delivery_id, copy.at, cause, previous.at))
            if cause is None:
                verdict.problem("duplicate at the relay without a fault to explain it", delivery_id)


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
