"""The summary table of a chaos run: the faults injected and what became of every notification."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from tests.chaos.faults import Crash, Fault
from tests.chaos.load import ProducerStats
from tests.chaos.verdict import SHOWN, Repeat, Verdict


def render(
    title: str,
    started: float,
    faults: list[Fault],
    crashes: list[Crash],
    refused_starts: int,
    stats: ProducerStats,
    verdict: Verdict,
    timings: dict[str, float],
    notes: Sequence[str] = (),
) -> str:
    """The table; times are seconds after the first request was sent. ``notes``: lines a
    run adds about what it checked beyond the table's rows."""
    lines = [f"== {title}", "", f"{'fault':<40} {'count':>5}  when (s)"]
    by_kind: dict[tuple[str, str], list[Fault]] = defaultdict(list)
    for fault in faults:
        target = "worker" if fault.target.startswith("worker") else fault.target
        by_kind[(target, fault.kind)].append(fault)
    for (target, kind), group in sorted(by_kind.items(), key=lambda item: item[1][0].start):
        when = ", ".join(_when(fault, started) for fault in group)
        lines.append(f"{target + ' ' + kind:<40} {len(group):>5}  {when}")
    lines.append(f"{'crash (exit nobody caused)':<40} {len(crashes):>5}")
    lines.append(f"{'start refused while Redis was down':<40} {refused_starts:>5}")

    answers = ", ".join(f"{code}: {n}" for code, n in sorted(stats.answers.items()))
    lines += [
        "",
        f"requests {stats.requests} ({answers}; no answer: {stats.no_answer}), "
        f"202 replayed for a retried key: {stats.replayed}",
        "",
        f"{'outcome':<48} {'expected':>9} {'found':>9}",
        *_outcomes(verdict),
    ]
    for what, repeats in (("repeats", verdict.repeats), ("SMTP duplicates", verdict.relay_repeats)):
        if causes := _causes(repeats):
            lines.append(f"{what} by fault: {causes}")
    # When each unexplained one happened, to set beside the faults' times above.
    lines += [
        f"unexplained {what} of {repeat.delivery_id}: sent at {repeat.previous_at - started:.1f}"
        f" s, again at {repeat.at - started:.1f} s"
        for what, repeats in (("repeat", verdict.repeats), ("duplicate", verdict.relay_repeats))
        for repeat in [r for r in repeats if r.explained_by is None][:SHOWN]
    ]
    if notes:
        lines += ["", *notes]
    lines.append("")
    lines += [f"{name}: {seconds:.1f} s" for name, seconds in timings.items()]
    failures = verdict.failures()
    lines += ["", "PASS" if not failures else "FAIL", *failures]
    return "\n".join(lines)


def _outcomes(verdict: Verdict) -> list[str]:
    """The rows of what became of the notifications: expected against found."""
    explained = sum(1 for r in verdict.repeats if r.explained_by is not None)
    # An idempotent provider turns every repeat into a no-op; without one, a repeat after a
    # fault is a duplicate the recipient sees, reported rather than expected away.
    once, more = (verdict.expected_sends, 0) if verdict.idempotent else ("-", "-")
    # SMTP is never idempotent: a copy the relay took again is reported, never expected.
    duplicates = len(verdict.relay_repeats)
    same_id_at_fault = sum(1 for r in verdict.relay_repeats if r.explained_by is not None)
    rows = [
        ("notifications acknowledged (202)", verdict.acknowledged, verdict.acknowledged),
        ("lost (acknowledged, missing in Redis or PG)", 0, len(verdict.lost)),
        ("extra (exist, never acknowledged)", 0, len(verdict.extra)),
        ("deliveries final, PG = Redis = directives", verdict.deliveries, verdict.final_agreeing),
        ("  of which released from Redis: PG only", "-", verdict.released),
        ("SENT deliveries through the sandbox", verdict.expected_sends, verdict.expected_sends),
        ("  received exactly once", once, verdict.sent_once),
        ("  received more than once (duplicates)", more, verdict.sent_more),
        ("repeated provider calls (duplicate=1)", "-", len(verdict.repeats)),
        ("  of which in flight at a fault", len(verdict.repeats), explained),
        ("SENT deliveries through SMTP", verdict.relay_sent, verdict.relay_sent),
        ("  received by the relay", verdict.relay_sent, verdict.relay_received),
        ("  lost (SENT, never received)", 0, len(verdict.relay_lost)),
        ("  received though not SENT", 0, verdict.relay_not_sent),
        ("  copies received again (duplicates)", "-", duplicates),
        ("    of which at a fault, same Message-ID", duplicates, same_id_at_fault),
        ("dead letters", verdict.dlq_expected, verdict.dlq_found),
    ]
    return [f"{label:<48} {want!s:>9} {got!s:>9}" for label, want, got in rows]


def _causes(repeats: list[Repeat]) -> str:
    """How many of ``repeats`` each kind of fault explains."""
    causes: defaultdict[str, int] = defaultdict(int)
    for repeat in repeats:
        if repeat.explained_by is not None:
            fault = repeat.explained_by
            causes[f"{fault.target.split('-')[0]} {fault.kind}"] += 1
    return ", ".join(f"{target}: {n}" for target, n in sorted(causes.items()))


def _when(fault: Fault, started: float) -> str:
    at = fault.start - started
    if fault.end - fault.start < 0.05:
        return f"{at:.1f}"
    return f"{at:.1f} (for {fault.end - fault.start:.1f})"
