"""The advisor's decision tree, branch by branch and in its order, as a table."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from app.operations.advisor import (
    ADD_WORKERS_TEXT,
    DEAD_LETTERS_TEXT,
    DELAYED_OVERDUE_LIMIT_MS,
    DLQ_AND_RETRIES_TEXT,
    LAG_TEXT,
    NO_WORKER_TEXT,
    PROJECTION_LAG_LIMIT_MS,
    PROJECTION_LAG_TEXT,
    PROVIDER_WAITS_TEXT,
    QUEUE_AGE_LIMIT_MS,
    RETRY_STORM_RETRIES,
    RETRY_STORM_TEXT,
    STABLE_TEXT,
    STATUS_WEBHOOK_LAG_TEXT,
    THROTTLED_A_LOT,
    THROTTLING_TEXT,
    WAITING_ENTRIES_LIMIT,
    WORKER_CPU_BUSY_SHARE,
    Problem,
    Signals,
    WorkLag,
    advise,
)
from tests.conftest import REPO

P = Problem
# Delivery workers at work with room to spare: the quiet baseline every row changes.
QUIET = Signals(workers_reporting=2, worker_cpu_share=0.3)
HIGH_LATE = (WorkLag("HIGH", 40, QUEUE_AGE_LIMIT_MS["HIGH"] + 1, shard=3),)
BUSY = {"workers_reporting": 2, "worker_cpu_share": WORKER_CPU_BUSY_SHARE}


def signals(**changes: object) -> Signals:
    return dataclasses.replace(QUIET, **changes)  # type: ignore[arg-type]


TABLE: list[tuple[str, Signals, list[Problem]]] = [
    ("nothing to see", QUIET, [P.STABLE]),
    ("no worker but nothing waits", Signals(), [P.STABLE]),
    ("dead letters with retries", signals(open_dead_letters=4, retries=1), [P.DLQ_AND_RETRIES]),
    (
        "dead letters with a retry storm: one cause, one hint",
        signals(open_dead_letters=4, retries=RETRY_STORM_RETRIES),
        [P.DLQ_AND_RETRIES],
    ),
    (
        "dead letters and retries come before lag",
        signals(open_dead_letters=1, retries=5, work=HIGH_LATE),
        [P.DLQ_AND_RETRIES, P.LAG_HIGH],
    ),
    ("HIGH older than its limit", signals(work=HIGH_LATE), [P.LAG_HIGH]),
    ("a few throttled deliveries", signals(throttled=(("news", THROTTLED_A_LOT - 1),)), [P.STABLE]),
    (
        "a type throttled a lot, after the provider waits",
        signals(throttled=(("news", THROTTLED_A_LOT),), rate_limit_waits=1),
        [P.PROVIDER_WAITS, P.THROTTLING],
    ),
    (
        "HIGH at its limit",
        signals(work=(WorkLag("HIGH", 40, QUEUE_AGE_LIMIT_MS["HIGH"]),)),
        [P.STABLE],
    ),
    (
        "LOW may wait longer than HIGH",
        signals(work=(WorkLag("LOW", 40, QUEUE_AGE_LIMIT_MS["HIGH"] * 10),)),
        [P.STABLE],
    ),
    (
        "too many entries of one priority",
        signals(work=(WorkLag("NORMAL", WAITING_ENTRIES_LIMIT + 1, 1000),)),
        [P.LAG_HIGH],
    ),
    (
        "due delayed entries not moved",
        signals(delayed_overdue_ms=DELAYED_OVERDUE_LIMIT_MS + 1),
        [P.LAG_HIGH],
    ),
    (
        "the projection lags, separately from the work",
        signals(work=HIGH_LATE, projection_lag_ms=PROJECTION_LAG_LIMIT_MS + 1),
        [P.LAG_HIGH, P.PROJECTION_LAG],
    ),
    ("a stuck status-webhook outbox", signals(stuck_outboxes=("shop",)), [P.STATUS_WEBHOOKS_LAG]),
    (
        "lag comes before dead letters",
        signals(open_dead_letters=2, work=HIGH_LATE),
        [P.LAG_HIGH, P.DEAD_LETTERS],
    ),
    ("open dead letters alone are never stable", signals(open_dead_letters=4), [P.DEAD_LETTERS]),
    ("retries at the storm's threshold", signals(retries=RETRY_STORM_RETRIES), [P.RETRY_STORM]),
    ("retries below it", signals(retries=RETRY_STORM_RETRIES - 1), [P.STABLE]),
    (
        "dead letters come before a retry storm, which goes with them",
        signals(open_dead_letters=1, retries=RETRY_STORM_RETRIES * 2),
        [P.DLQ_AND_RETRIES],
    ),
    ("an open circuit alone", signals(circuits_not_closed=("sms",)), [P.PROVIDER_WAITS]),
    ("rate-limit waits alone", signals(rate_limit_waits=3), [P.PROVIDER_WAITS]),
    (
        "provider waits come after dead letters",
        signals(open_dead_letters=1, circuits_not_closed=("sms",)),
        [P.DEAD_LETTERS, P.PROVIDER_WAITS],
    ),
    (
        "the lag hint names provider waits itself",
        signals(work=HIGH_LATE, circuits_not_closed=("sms",)),
        [P.LAG_HIGH],
    ),
]


@pytest.mark.parametrize(("case", "given", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_each_branch_in_the_tree_order(case: str, given: Signals, expected: list[Problem]) -> None:
    assert [hint.problem for hint in advise(given)] == expected


TEXTS = {
    P.DLQ_AND_RETRIES: DLQ_AND_RETRIES_TEXT,
    P.PROJECTION_LAG: PROJECTION_LAG_TEXT,
    P.STATUS_WEBHOOKS_LAG: STATUS_WEBHOOK_LAG_TEXT,
    P.DEAD_LETTERS: DEAD_LETTERS_TEXT,
    P.RETRY_STORM: RETRY_STORM_TEXT,
    P.PROVIDER_WAITS: PROVIDER_WAITS_TEXT,
    P.THROTTLING: THROTTLING_TEXT,
    P.STABLE: STABLE_TEXT,
}


@pytest.mark.parametrize(("case", "given", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_each_hint_carries_its_branch_text(
    case: str, given: Signals, expected: list[Problem]
) -> None:
    for hint in advise(given):
        if hint.problem in TEXTS:
            assert hint.text == TEXTS[hint.problem]
        assert hint.evidence


WORKERS_TABLE: list[tuple[str, Signals, str]] = [
    ("busy workers, providers with room", signals(work=HIGH_LATE, **BUSY), "add"),
    ("no worker reports", Signals(work=HIGH_LATE), "none"),
    ("workers with CPU to spare", signals(work=HIGH_LATE, worker_cpu_share=0.5), "not"),
    (
        "busy but a circuit is open",
        signals(work=HIGH_LATE, circuits_not_closed=("sms",), **BUSY),
        "not",
    ),
    ("busy but rate-limit waits", signals(work=HIGH_LATE, rate_limit_waits=1, **BUSY), "not"),
    ("busy but in-flight bound waits", signals(work=HIGH_LATE, bulkhead_waits=1, **BUSY), "not"),
    (
        "busy in a retry storm",
        signals(work=HIGH_LATE, retries=RETRY_STORM_RETRIES, **BUSY),
        "not",
    ),
    (
        "busy with dead letters and retries",
        signals(work=HIGH_LATE, open_dead_letters=1, retries=1, **BUSY),
        "not",
    ),
]


@pytest.mark.parametrize(
    ("case", "given", "workers"), WORKERS_TABLE, ids=[row[0] for row in WORKERS_TABLE]
)
def test_adding_workers_is_advised_only_when_they_are_the_bottleneck(
    case: str, given: Signals, workers: str
) -> None:
    [lag] = [hint for hint in advise(given) if hint.problem is P.LAG_HIGH]
    assert ("add workers" in lag.text) is (workers == "add")
    assert (ADD_WORKERS_TEXT in lag.text) is (workers == "add")
    if workers == "none":
        assert lag.text == NO_WORKER_TEXT
        assert "no worker reports" in lag.evidence
    else:
        assert lag.text.startswith(LAG_TEXT)
    if workers == "not":
        assert "not the workers" in lag.evidence


def test_the_lag_hint_says_where_to_look_and_what_it_saw() -> None:
    given = signals(work=HIGH_LATE, largest_queue=("shop", 900), circuits_not_closed=("sms",))
    [lag] = advise(given)
    for looked_at in ("downstream latency", "circuits", "rate-limit waits", "hot spots"):
        assert looked_at in lag.text
    assert "pending entries per consumer" in lag.text
    assert "XAUTOCLAIM" in lag.text
    assert "HIGH: 40 waiting, the oldest 5.0 s (shard 3)" in lag.evidence
    assert "largest producer queue: shop (900)" in lag.evidence
    assert "circuit of sms not closed" in lag.evidence


def test_the_throttling_hint_names_each_type_throttled_a_lot() -> None:
    given = signals(throttled=(("digest", 3), ("news", 250), ("promo", THROTTLED_A_LOT)))
    [hint] = advise(given)
    assert hint.problem is P.THROTTLING
    assert hint.evidence == f"news: 250 refused, promo: {THROTTLED_A_LOT} refused"
    assert "a producer may be looping" in hint.text


def test_every_text_names_a_command_or_a_metric_to_look_at() -> None:
    for text in [*TEXTS.values(), LAG_TEXT, NO_WORKER_TEXT, ADD_WORKERS_TEXT]:
        assert "`" in text or "clarion_" in text, text
    assert "check the error classification" in DLQ_AND_RETRIES_TEXT
    assert "Do not scale blindly" in DLQ_AND_RETRIES_TEXT
    assert "replay only after the fix" in DEAD_LETTERS_TEXT
    assert "increase the backoff" in RETRY_STORM_TEXT


RUNBOOKS = REPO / "docs" / "running" / "runbooks.md"
ALERTS = REPO / "deploy" / "prometheus" / "clarion-alerts.yml"
# Each alert's hint texts, as its runbook section quotes them; alerts the advisor does not
# see (the scrape, the API's answers) have none.
ALERT_HINTS: dict[str, tuple[str, ...]] = {
    "ClarionMetricsDown": (),
    "ClarionHighPriorityLagHigh": (LAG_TEXT, ADD_WORKERS_TEXT, NO_WORKER_TEXT),
    "ClarionNormalPriorityLagHigh": (LAG_TEXT,),
    "ClarionLowPriorityLagHigh": (LAG_TEXT,),
    "ClarionDueRetriesNotMoved": (NO_WORKER_TEXT,),
    "ClarionDeadLettersGrowing": (DLQ_AND_RETRIES_TEXT, DEAD_LETTERS_TEXT),
    "ClarionRetryStorm": (DLQ_AND_RETRIES_TEXT, RETRY_STORM_TEXT),
    "ClarionProviderCircuitOpen": (PROVIDER_WAITS_TEXT,),
    "ClarionBugErrors": (DEAD_LETTERS_TEXT,),
    "ClarionProjectionLagHigh": (PROJECTION_LAG_TEXT,),
    "ClarionStatusWebhooksLagHigh": (STATUS_WEBHOOK_LAG_TEXT,),
    "ClarionStatusWebhookOutboxStuck": (STATUS_WEBHOOK_LAG_TEXT,),
    "ClarionApiServerErrors": (),
}


def runbook_sections() -> dict[str, str]:
    """Each ``## `` section of the runbooks page by its title, as one line of words (quote
    marks and line breaks dropped), so a quoted text may wrap."""
    sections = re.split(r"^## ", RUNBOOKS.read_text(), flags=re.MULTILINE)[1:]
    found = {}
    for section in sections:
        title, _, body = section.partition("\n")
        lines = [line.removeprefix(">").strip() for line in body.splitlines()]
        found[title.strip()] = " ".join(" ".join(lines).split())
    return found


def test_every_alert_is_mapped_to_its_hints() -> None:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    assert set(ALERT_HINTS) == alerts


@pytest.mark.parametrize("alert", sorted(ALERT_HINTS))
def test_each_alerts_runbook_section_quotes_its_hint_verbatim(alert: str) -> None:
    section = runbook_sections()[alert]
    for text in ALERT_HINTS[alert]:
        assert text in section, f"the runbook of {alert} does not quote: {text}"


def test_the_runbooks_quote_every_hint_in_the_trees_order() -> None:
    tree = runbook_sections()["The advisor"]
    texts = [
        DLQ_AND_RETRIES_TEXT, LAG_TEXT, ADD_WORKERS_TEXT, DEAD_LETTERS_TEXT, RETRY_STORM_TEXT,
        PROVIDER_WAITS_TEXT, STABLE_TEXT,
    ]  # fmt: skip
    positions = [tree.find(text) for text in texts]
    assert -1 not in positions
    assert positions == sorted(positions)
