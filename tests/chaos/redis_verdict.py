"""What the Redis-fault runs judge beyond ``verdict.judge``: faults the service must heal from
by itself, without any restart.

No POISON anywhere, no process exited or restarted, readiness and ingest answering 503 while
Redis is out of memory (and readiness 200 soon after), and, after an empty restart, a verdict
on the notifications made after it only (``made_after``, ``evidence.made_since``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from tests.chaos.evidence import Evidence, minted_at
from tests.chaos.faults import Fault
from tests.chaos.load import Acknowledged, Answer
from tests.chaos.redis_faults import Reading
from tests.chaos.verdict import Verdict

# How soon readiness must answer 200 again once Redis takes writes again.
READY_AGAIN_S = 10.0


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
