"""Benchmark report: every benchmark in one run, one JSON file and one Markdown summary.

Run from anywhere with the project's virtualenv (``make bench-report`` installs the
``bench`` extra first)::

    .venv/bin/python bench/report.py           # sized to stay under 15 minutes on 2 cores
    .venv/bin/python bench/report.py --quick   # a smoke run (under 4 minutes)
    .venv/bin/python bench/report.py --render bench/results/report-<…>.json  # its summary again

It runs, one after the other and never two at once (each would measure the others), the
benchmark scripts of this directory as subprocesses with this python: ``ingest.py``,
``pipeline.py`` (end to end, and HIGH latency under a LOW flood), ``projector.py``,
``memory.py``, ``peers.py`` (Clarion beside the best of several Celery and arq setups) and
``instructions.py`` (instruction counts under valgrind, which do not depend on how busy the
machine is). Their output is passed through; each writes its JSON result into a scratch
directory (``CLARION_BENCH_RESULTS``, see ``bench/harness.py``), which the report reads and
embeds whole. So the benchmarks' own latest results in ``bench/results/`` stay as they are,
and a run writes one pair of files there, which replaces the previous report:
``report-<UTC timestamp>.json`` (every figure with its target and verdict, each benchmark's
full result, machine and commit) and ``report-<…>.md`` (a table per benchmark and the peer
ratios), which is also printed. The figures and the Markdown come from
``bench/report_summary.py``, the report's own part.

Targets are judged as the benchmarks judge them, on the configuration Clarion ships for two
cores: the pipeline's on its run with two delivery workers. A benchmark that fails or finds
its run untrustworthy (lost deliveries, errors) makes the exit status 1; a missed target
alone does not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import redis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    REDIS_URL,
    REPO,
    RESULTS_DIR,
    WRITTEN,
    git_output,
    machine_info,
    remove_older_results,
    result_stem,
    shown,
)
from bench.report_summary import figures_of, markdown

WRITTEN_LINE: Final = re.compile(rf"^{re.escape(WRITTEN)}(\S+\.json)$")


@dataclass(frozen=True)
class Step:
    """One benchmark script and its arguments for a full and for a quick run."""

    name: str
    script: str  # relative to the repository
    args: list[str] = field(default_factory=list)
    quick_args: list[str] = field(default_factory=lambda: ["--quick"])


STEPS: Final = (
    Step("ingest", "bench/ingest.py"),
    # Two delivery workers, the configuration the targets are judged on, and a flood of
    # 1,000,000 LOW notifications (quick: 100,000).
    Step("pipeline", "bench/pipeline.py", quick_args=["--quick", "--flood", "100000"]),
    Step("projector", "bench/projector.py"),
    # Redis memory per accepted notification. Quick: 2,000 notifications (it has no --quick).
    Step("memory", "bench/memory.py", quick_args=["--count", "2000"]),
    Step("peers", "bench/peers.py"),
    # Instructions per notification and per delivery, under valgrind: machine-independent.
    Step("instructions", "bench/instructions.py", quick_args=["--units", "1"]),
)


def run_step(step: Step, quick: bool, scratch: Path) -> dict[str, Any]:
    """Run one benchmark, passing its output through; its result (written into ``scratch``)
    and how the run went."""
    script = REPO / step.script
    if not script.exists():
        print(f"\n=== {step.name}: {step.script} does not exist, skipped ===", flush=True)
        return {"status": "missing", "script": step.script}
    argv = [sys.executable, str(script), *(step.quick_args if quick else step.args)]
    print(f"\n=== {step.name}: {' '.join([step.script, *argv[2:]])} ===", flush=True)
    started = time.monotonic()
    written: Path | None = None
    env = {**os.environ, "CLARION_BENCH_RESULTS": str(scratch)}
    with subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None  # stdout=PIPE
        for line in process.stdout:
            print(line, end="", flush=True)
            if match := WRITTEN_LINE.match(line.strip()):
                written = REPO / match.group(1)  # as printed: absolute, or within REPO
    outcome: dict[str, Any] = {
        "script": step.script,
        "args": argv[2:],
        "exit_status": process.returncode,
        "seconds": round(time.monotonic() - started, 1),
    }
    if written is None or not written.exists():
        return outcome | {"status": "failed"}
    result = json.loads(written.read_text())  # embedded whole in the report
    status = "ok" if process.returncode == 0 else "untrustworthy"
    return outcome | {"status": status, "result": result}


def git_dirty() -> bool | None:
    """Whether the work tree differs from its commit (the figures may not be the commit's)."""
    status = git_output("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status.strip())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark's short run")
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated steps to run (default: all of {', '.join(s.name for s in STEPS)})",
    )
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        help="run nothing: take the steps' results from this report's JSON and write its "
        "figures and Markdown again with the current summary (bench/report_summary.py)",
    )
    args = parser.parse_args()
    names = {step.name for step in STEPS}
    args.only = [name.strip() for name in args.only.split(",") if name.strip()] or [
        step.name for step in STEPS
    ]
    if unknown := sorted(set(args.only) - names):
        parser.error(f"--only: unknown step(s) {', '.join(unknown)}")
    return args


def render(path: Path) -> int:
    """Write the figures and the Markdown of the report at ``path`` again, from the results
    it embeds (when the summary learnt to show more of them)."""
    report = json.loads(path.read_text())
    report["figures"] = figures_of(report["steps"])
    judged = [figure["pass"] for figure in report["figures"] if figure["pass"] is not None]
    report["summary"] |= {
        "targets_met": sum(judged),
        "targets_judged": len(judged),
        "all_targets_met": bool(judged) and all(judged),
    }
    path.write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    path.with_suffix(".md").write_text(text)
    print(text)
    print(f"{WRITTEN}{shown(path)} and .md")
    return 0


def main() -> int:
    """Run the steps, write the report; 1 when a benchmark failed or was untrustworthy."""
    args = parse_args()
    if args.render:
        return render(args.render)
    started = datetime.now(UTC)
    client = redis.Redis.from_url(REDIS_URL)  # the benchmarks' default Redis
    try:
        machine = machine_info(client) | {"git_dirty": git_dirty()}
    finally:
        client.close()
    with tempfile.TemporaryDirectory(prefix="clarion-report-") as scratch:
        steps = {
            step.name: run_step(step, args.quick, Path(scratch))
            for step in STEPS
            if step.name in args.only
        }
    figures = figures_of(steps)
    judged = [figure["pass"] for figure in figures if figure["pass"] is not None]
    failed = [name for name, step in steps.items() if step["status"] in {"failed", "untrustworthy"}]
    report: dict[str, Any] = {
        "benchmark": "report",
        "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": machine,
        "summary": {
            "targets_met": sum(judged),
            "targets_judged": len(judged),
            "all_targets_met": bool(judged) and all(judged),
            "steps_failed_or_untrustworthy": failed,
            "steps_missing": [name for name, step in steps.items() if step["status"] == "missing"],
        },
        "figures": figures,
        "steps": steps,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = result_stem("report", started)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    stem.with_suffix(".md").write_text(text)
    remove_older_results("report", stem)
    print("\n" + text)
    print(f"{WRITTEN}{shown(stem)}.json and .md")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
