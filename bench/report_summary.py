"""The figures of a benchmark report and its Markdown summary: part of ``bench/report.py``.

Each benchmark's JSON result has its own shape; this module picks the figures a reader looks
for first from each, pairs them with the targets the benchmark itself recorded and judged,
and lays them out as Markdown tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

TARGET_WORKERS: Final = 2  # the pipeline's targets are judged on its two-worker run
PEER_NAMES: Final = {"clarion": "Clarion", "celery": "Celery", "arq": "arq"}
MAX_PROBLEMS_SHOWN: Final = 10
BARE_FIGURE: Final = "bare Litestar + 1 EVALSHA"
NORMAL_BARE_RATE: Final = 8_000  # req/s of the bare endpoint at this machine's normal speed

Figure = dict[str, Any]


def figure(
    benchmark: str,
    name: str,
    value: float | None,
    unit: str,
    target: tuple[str, float] | None = None,
    passed: bool | None = None,
) -> Figure:
    """One reported figure; ``target`` is (comparison, value), e.g. (">=", 30000.0)."""
    return {
        "benchmark": benchmark,
        "figure": name,
        "value": value,
        "unit": unit,
        "target": None if target is None else f"{target[0]} {number(target[1], unit)}",
        "target_value": None if target is None else target[1],
        "pass": passed,
    }


def ingest_figures(result: dict[str, Any]) -> list[Figure]:
    single, batch = result["single"], result["batch"]
    targets, ok = result["targets"], result["pass"]
    return [
        figure("ingest", BARE_FIGURE, single["bare"]["requests_per_s"], "req/s"),
        figure("ingest", "POST /v1/notifications", single["clarion"]["requests_per_s"], "req/s"),
        figure("ingest", "POST /v1/notifications p99", single["clarion"]["latency_p99_ms"], "ms"),
        figure(
            "ingest",
            "single POST ÷ bare",
            single["single_vs_bare_ratio"],
            "",
            (">=", targets["single_vs_bare_ratio"]),
            ok["single_vs_bare_ratio"],
        ),
        figure(
            "ingest",
            "batch notifications/s",
            batch["notifications_per_s"],
            "/s",
            (">=", targets["batch_notifications_per_s"]),
            ok["batch_notifications_per_s"],
        ),
        figure(
            "ingest",
            "batch: CPU µs per notification (API and Redis)",
            sum(v for k, v in batch.get("cpu_us_per_notification", {}).items() if k != "bench"),
            "µs",
        ),
    ]


def pipeline_figures(result: dict[str, Any]) -> list[Figure]:
    targets = result["targets"]
    figures = []
    for run in result["runs"]:
        judged = run["workers"] == TARGET_WORKERS
        label = f"{run['workers']} worker(s)"
        e2e, flood = run["e2e"], run["flood"]
        figures += [
            figure(
                "pipeline",
                f"{label}: end to end deliveries/s",
                e2e["deliveries_per_s"],
                "/s",
                (">=", targets["e2e_deliveries_per_s"]) if judged else None,
                run["pass"]["e2e_deliveries_per_s"] if judged else None,
            ),
            figure(
                "pipeline",
                f"{label}: CPU µs per delivery end to end (API, workers, Redis)",
                e2e["cpu_us_per_delivery"].get("total"),
                "µs",
            ),
            figure("pipeline", f"{label}: cores busy end to end", e2e["cores_used"], ""),
            figure("pipeline", f"{label}: LOW flood drained", flood["low_deliveries_per_s"], "/s"),
        ]
        # HIGH latency from the client's send (before its POST) to the provider call; the
        # target holds for all of them and for those sent while the flood was ingested.
        high = flood["high_latency_breakdown_ms"]
        target = ("<", targets["high_p99_ms_under_low_flood"]) if judged else None
        passed = run["pass"]["high_p99_ms"] if judged else None
        for part, text in (("all", ""), ("while_flood_ingested", ", while it was ingested")):
            name = f"{label}: HIGH p%d from the client under LOW flood{text}"
            figures += [
                figure("pipeline", name % 50, high[part]["total"]["p50"], "ms"),
                figure("pipeline", name % 99, high[part]["total"]["p99"], "ms", target, passed),
            ]
    return figures


def projector_figures(result: dict[str, Any]) -> list[Figure]:
    targets, ok = result["targets"], result["pass"]
    figures = [
        figure(
            "projector",
            "projector alone, events/s",
            result["throughput"]["events_per_s"],
            "/s",
            (">=", targets["events_per_s"]),
            ok["events_per_s"],
        )
    ]
    lag = result["lag"]
    if lag:
        figures += [
            figure(
                "projector",
                "end-to-end capacity measured, deliveries/s (API, 2 workers, projector)",
                lag["capacity_deliveries_per_s"],
                "/s",
            ),
            figure(
                "projector",
                f"deliveries/s offered ({lag['rate_from']})",
                lag["offered_deliveries_per_s"],
                "/s",
            ),
            figure(
                "projector",
                "end-to-end deliveries/s reached meanwhile",
                lag["end_to_end_deliveries_per_s"],
                "/s",
            ),
            figure(
                "projector",
                "projection lag p50 (event written to row visible)",
                lag["projection_lag_ms"]["p50"],
                "ms",
            ),
            figure(
                "projector",
                "projection lag p99 (event written to row visible)",
                lag["projection_lag_ms"]["p99"],
                "ms",
                ("<", targets["lag_p99_ms"]),
                ok["lag_p99_ms"],
            ),
            figure(
                "projector",
                "CPU µs per delivery end to end, projection included "
                "(API, workers, projector, Redis, PostgreSQL)",
                lag["cpu"]["total_us_per_delivery"],
                "µs",
            ),
            figure(
                "projector",
                f"CPU cores the whole pipeline needs at "
                f"{lag['cpu']['reference_deliveries_per_s']:,.0f} deliveries/s",
                lag["cpu"]["total_cores_at_reference_rate"],
                "",
            ),
        ]
    return figures


def instructions_figures(result: dict[str, Any]) -> list[Figure]:
    figures = []
    for kind, run in result["workloads"].items():
        unit = run["unit"]
        figures += [
            figure("instructions", f"{kind}: Python per {unit}", run["python_per_unit"], "instr"),
            figure("instructions", f"{kind}: Redis per {unit}", run["redis_per_unit"], "instr"),
        ]
        for side, spread in run.get("spread_pct", {}).items():
            name = f"{kind}: {side.capitalize()} spread between runs"
            figures.append(figure("instructions", name, spread, "%"))
    return figures


def memory_figures(result: dict[str, Any]) -> list[Figure]:
    """``bench/memory.py``'s bytes per notification by key kind, its steady state at the
    seeds' daily volume, then its own verdicts (the raw totals stay in its result)."""
    targets = result.get("targets", {})
    figures = [
        figure("memory", f"{kind}: bytes per notification", value, "B")
        for kind, value in result.get("bytes_per_notification_by_kind", {}).items()
    ]
    steady = result.get("steady_state_at_50m_per_day")
    if steady:
        figures.append(
            figure("memory", "steady state at 50 M notifications/day", steady["total_bytes"], "B")
        )
    if "bytes_per_daily_notification" in result:
        value = round(result["bytes_per_daily_notification"], 1)
        figures.append(figure("memory", "bytes per notification of daily volume", value, "B"))
    for name, passed in result.get("pass", {}).items():
        verdict = figure("memory", f"verdict: {name}", None, "", passed=bool(passed))
        if name in targets:  # its comparison is the benchmark's own; show the value only
            verdict |= {"target": str(targets[name]), "target_value": targets[name]}
        figures.append(verdict)
    return figures


def peers_figures(result: dict[str, Any]) -> list[Figure]:
    """Every configuration's deliveries/s and latency, then Clarion ÷ the best configuration
    of each peer against its goal (judged like a target)."""
    figures = []
    for name, run in result["runs"].items():
        figures += [
            figure("peers", f"{name}: deliveries/s", run["deliveries_per_s"], "/s"),
            figure("peers", f"{name}: latency p50", run["latency_ms"]["p50"], "ms"),
            figure("peers", f"{name}: latency p99", run["latency_ms"]["p99"], "ms"),
        ]
    for peer, compared in result["ratios"].items():
        title = PEER_NAMES.get(peer, peer)
        best = compared["best"] or "none trustworthy"
        figures.append(
            figure(
                "peers",
                f"Clarion ÷ best {title} ({best}): deliveries/s",
                compared["deliveries_per_s"],
                "",
                (">=", compared["goal"]),
                compared["reached"],
            )
        )
    return figures


EXTRACTORS: Final[dict[str, Callable[[dict[str, Any]], list[Figure]]]] = {
    "ingest": ingest_figures,
    "pipeline": pipeline_figures,
    "projector": projector_figures,
    "memory": memory_figures,
    "peers": peers_figures,
    "instructions": instructions_figures,
}


def figures_of(steps: dict[str, dict[str, Any]]) -> list[Figure]:
    """The figures of every step that produced a result."""
    return [
        found
        for name, step in steps.items()
        if "result" in step
        for found in EXTRACTORS[name](step["result"])
    ]


# --- Markdown --------------------------------------------------------------------------


def number(value: float | None, unit: str) -> str:
    """A figure as a reader wants it: ratios with two decimals, large numbers grouped."""
    if value is None:
        return "n/a"
    if unit == "":
        text = f"{value:.2f}"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.1f}"
    return f"{text} {unit}".strip()


def verdict(passed: bool | None) -> str:
    return "" if passed is None else ("pass" if passed else "**FAIL**")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def goal_verdict(reached: bool | None) -> str:
    """A peer goal's verdict, said plainly when it was not reached."""
    if reached is None:
        return "not judged"
    return "reached" if reached else "**not reached**"


def peers_tables(result: dict[str, Any]) -> list[str]:
    """Every configuration side by side, the best of each peer marked; then Clarion ÷ the
    best of each peer against its goal."""
    best = {compared["best"] for compared in result["ratios"].values()}
    rows = [
        [
            f"{name} (best)" if name in best else name,
            run["config"]["settings"],
            f"{run['jobs']:,}",
            f"{run['enqueue_per_s']:,.0f}",
            f"{run['deliveries_per_s']:,.0f}",
            f"{run['latency_ms']['p50']:,.0f}",
            f"{run['latency_ms']['p99']:,.0f}",
            f"{run['delivered']:,}",
            str(run["repeated_sends"]),
        ]
        for name, run in result["runs"].items()
    ]
    header = ["configuration", "settings", "jobs", "enqueue/s", "deliveries/s", "p50 ms"]
    header += ["p99 ms", "delivered", "dup"]
    lines = [result["parameters"]["job"] + ".", "", *table(header, rows), ""]
    lines += ["(best): the peer's configuration with the most deliveries/s.", ""]
    ratio_rows = [
        [
            f"Clarion ÷ best {PEER_NAMES.get(peer, peer)} ({compared['best'] or 'none'})",
            number(compared["deliveries_per_s"], ""),
            f">= {number(compared['goal'], '')}",
            goal_verdict(compared["reached"]),
        ]
        for peer, compared in result["ratios"].items()
    ]
    if ratio_rows:
        header = ["ratio", "deliveries/s", "goal", "verdict"]
        lines += [*table(header, ratio_rows), ""]
    return lines


def calibration(report: dict[str, Any]) -> list[str]:
    """How fast this machine was: the bare endpoint (Litestar and one EVALSHA, no Clarion
    code) that the targets assume at 8,000 req/s or more on two cores."""
    for found in report["figures"]:
        if found["figure"] == BARE_FIGURE and found["value"] is not None:
            speed = "normal" if found["value"] >= NORMAL_BARE_RATE else "slower than normal"
            return [
                f"Calibration: the bare endpoint made {found['value']:,.0f} req/s; the targets "
                f"assume >= {NORMAL_BARE_RATE:,} (this machine at normal speed), so this run "
                f"was {speed}.",
                "",
            ]
    return []


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: machine, a table per benchmark, the peers, the problems."""
    machine, summary = report["machine"], report["summary"]
    dirty = " (with uncommitted changes)" if machine.get("git_dirty") else ""
    lines = [
        f"# Clarion benchmark report, {report['started_utc']}"
        + (" (quick run)" if report["quick"] else ""),
        "",
        f"Commit {machine.get('git_commit')}{dirty}; {machine['cpu_count']} cores, "
        f"load average at start {machine['load_average_at_start'][0]}; Python "
        f"{machine['python']}, Redis {machine['redis_version']}; {machine['platform']}.",
        "",
        *calibration(report),
        f"Targets met: {summary['targets_met']} of {summary['targets_judged']}.",
        "",
    ]
    problems: list[str] = []
    for name, step in report["steps"].items():
        lines.append(f"## {name} (`{step['script']}`)")
        lines.append("")
        if step["status"] == "missing":
            lines += [f"Not run: `{step['script']}` does not exist.", ""]
            continue
        lines.append(f"{step['seconds']:.0f} s, exit status {step['exit_status']}.")
        lines.append("")
        if "result" not in step:
            lines += ["**The benchmark wrote no result**; see its output above.", ""]
            problems.append(f"{name}: no result (exit status {step['exit_status']})")
            continue
        if name == "peers":  # side by side says more than a list of figures
            lines += peers_tables(step["result"])
        else:
            rows = [
                [f["figure"], number(f["value"], f["unit"]), f["target"] or "", verdict(f["pass"])]
                for f in report["figures"]
                if f["benchmark"] == name
            ]
            lines += [*table(["figure", "measured", "target", "verdict"], rows), ""]
        found = step["result"].get("problems", [])
        problems += [f"{name}: {p}" for p in found[:MAX_PROBLEMS_SHOWN]]
        if len(found) > MAX_PROBLEMS_SHOWN:
            problems.append(f"{name}: … {len(found) - MAX_PROBLEMS_SHOWN} more in the JSON")
    if problems:
        lines += ["## Problems (these runs' figures do not count)", ""]
        lines += [f"- {problem}" for problem in problems] + [""]
    return "\n".join(lines)
