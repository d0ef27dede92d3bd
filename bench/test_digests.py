"""bench/digests.py's own parts: its catalog, its batches and its arithmetic; and a quick run.

It belongs to the benchmarks (``make bench-check`` runs it; ``make test`` does not collect
it). The quick run needs the local Redis and PostgreSQL the benchmarks use, takes a minute or
two, and is skipped without Redis::

    .venv/bin/pytest bench/test_digests.py
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
import redis

from app.catalog import load_catalog
from bench import harness
from bench.digests import (
    DIGEST_TYPE,
    PLAIN_TYPE,
    Outcome,
    closing_bodies,
    due_figures,
    lateness,
    main,
    pair_sets,
    parse_args,
    write_catalog,
)


def uuid7_at(ms: int) -> str:
    """A UUIDv7-shaped id made at ``ms``."""
    text = f"{ms:012x}"
    return f"{text[:8]}-{text[8:]}-7000-8000-000000000000"


def test_the_catalog_has_the_two_types_alike_but_for_the_digest(tmp_path: Path) -> None:
    path = tmp_path / "clarion.toml"
    write_catalog(path, "15s")
    catalog = load_catalog(str(path))
    assert catalog.digests[DIGEST_TYPE].window_ms == 15_000
    assert PLAIN_TYPE not in catalog.digests
    digest, plain = catalog.types[DIGEST_TYPE], catalog.types[PLAIN_TYPE]
    assert (digest.channels, digest.priority) == (plain.channels, plain.priority)


def test_each_batch_names_distinct_pairs_and_the_batches_cover_them() -> None:
    sets = pair_sets(DIGEST_TYPE, 2500, 1000, 1000)
    assert [len(parts) - 1 for parts in sets] == [1000, 1000, 500]
    body = json.loads(b"tag".join(sets[2]))["notifications"]
    assert body[0]["idempotency_key"] == "tag-0"
    assert body[0]["recipient"]["id"] == "r-0"  # pair 2000: recipient 0, thread 2
    assert body[0]["data"]["thread_id"] == "t-2"
    assert len({(n["recipient"]["id"], n["data"]["thread_id"]) for n in body}) == 500


def test_paced_openings_come_at_the_due_rate_then_the_joins() -> None:
    args = parse_args(["--digests", "1000", "--items", "3", "--due-rate", "200"])
    bodies = closing_bodies(args, "t")
    openings = [offset for offset, body in bodies if b"-open" in body]
    assert len(openings) == 100  # ten digests every 50 ms
    assert openings[1] == pytest.approx(0.05)
    joins = [offset for offset, body in bodies if b"-join" in body]
    assert len(joins) == 2
    assert joins[0] == openings[-1]


def test_due_digests_are_counted_over_their_span() -> None:
    figures = due_figures({"a": 10_000, "b": 10_500, "c": 12_000})
    assert figures == {"digests": 3, "span_s": 2.0, "due_per_s": 1.5, "busiest_second": 2}


def test_lateness_and_what_happened_more_than_once() -> None:
    closes = {"a": 1_000_000, "b": 1_000_000, "c": 1_000_000}
    outcome = Outcome()
    outcome.made["a"].append((uuid7_at(1_000_200), ["da"]))
    outcome.made["b"] += [(uuid7_at(1_000_900), ["db"]), (uuid7_at(1_000_950), ["dx"])]
    outcome.closed["a"] += [(1_000_210, "n1"), (1_000_400, "n1")]
    outcome.closed["b"].append((1_000_905, "n2"))
    figures, counts = lateness(closes, outcome, {"da": 1_000_300})
    assert figures["notification_made"]["p50"] == 200.0
    assert figures["notification_made"]["max"] == 900.0
    assert figures["digest_closed_event"]["max"] == 905.0
    assert figures["delivery_sent"]["count"] == 1
    assert counts["digests_not_closed"] == 1  # c
    assert counts["digests_closed_more_than_once"] == 1  # a, into one notification
    assert counts["notifications_made_more_than_once"] == 1  # b
    assert counts["digest_closed_events"] == 3


def test_quick_makes_the_runs_smaller() -> None:
    args = parse_args(["--quick"])
    assert (args.duration, args.rounds, args.digests) == (2.0, 1, 1000)
    with pytest.raises(SystemExit):
        parse_args(["--recipients", "10", "--threads", "10"])


def test_a_quick_run_measures_both_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        redis.Redis.from_url(harness.REDIS_URL).ping()
    except redis.RedisError:
        pytest.skip("no Redis at the benchmarks' URL")
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    started = datetime.now(UTC)
    assert main(["--quick"]) == 0
    [written] = tmp_path.glob("digests-*.json")
    result = msgspec.json.decode(written.read_bytes())
    assert result["started_utc"] >= started.isoformat(timespec="seconds")[:16]
    assert result["joining"]["by_type"][DIGEST_TYPE]["notifications_per_s"] > 0
    closing = result["closing"]
    assert closing["lateness_ms"]["notification_made"]["count"] == 1000
    assert closing["notifications_made_more_than_once"] == 0
