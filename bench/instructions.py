"""Instructions per notification at ingest and per delivery, counted by valgrind's callgrind.

Run from anywhere with the project's virtualenv (valgrind must be installed)::

    .venv/bin/python bench/instructions.py                  # 2,000 notifications each
    .venv/bin/python bench/instructions.py --source ../old  # another checkout's code
    .venv/bin/python bench/instructions.py --runs 5         # each workload five times
    .venv/bin/python bench/instructions.py --workloads digest,digest-plain   # joins

Seconds measured on a shared two-core machine swing by a factor of two or more from one hour
to the next; instruction counts do not. Each workload runs in a Python process of its own
under callgrind against a private ``redis-server``, also under callgrind, with counting
switched on (``callgrind_control``) only around the measured part:

- ``ingest``: decode batch bodies of 1000 notifications as the batch endpoint does
  (``order_confirmed`` with an email address and a phone number: EMAIL and IN_APP queued,
  PUSH suppressed) and accept them with ``app.ingest.ingestor.Ingestor``. HTTP is not included
  (``bench/ingest.py`` measures it against a bare endpoint).
- ``delivery``: the same notifications are accepted first, uncounted; then a
  ``DeliveryWorker`` sends every queued delivery to the zero-latency sandbox provider and
  records the outcomes.
- ``digest`` and ``digest-plain`` (only with ``--workloads``): ``bench/digests.py``'s
  ``comment`` notifications, each joining the digest open for its (recipient, thread), and
  the same notifications of ``comment_plain``, which differs only in having no digest. Each
  batch names 1000 distinct (recipient, thread) pairs; an uncounted first pass over the
  same pairs opens their digests, so the counted joins are the common case: a digest open.

After an uncounted warm-up batch the garbage collector is set up as the service's processes
set it (``app.processes.gc_tuning``), where the measured checkout has that. Python's and Redis's
counts are reported apart, per notification or per delivery.

The code measured is this checkout's, or ``--source``'s (for a before/after comparison): the
workload imports Clarion's modules (``app``, ``streams``, ``projections``) by name from that
checkout, and the benchmark's own code (``bench``) from this one. So ``--source`` works for
checkouts with the current layout of those modules, commit 4c780e2 or later. The result is
printed and written to ``bench/results/instructions-<UTC timestamp>.json``, which replaces
the older instructions results there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    # A workload measuring another checkout's code imports Clarion's modules from that
    # checkout, and the benchmark's own (``bench``, imported here first) from this one.
    import bench  # noqa: F401

    if os.environ.get("CLARION_BENCH_SOURCE"):
        sys.path.insert(0, os.environ["CLARION_BENCH_SOURCE"])

from bench import digests
from bench.harness import (
    BATCH_SIZE,
    BENCH_DIGEST,
    REPO,
    BenchError,
    batch_pieces,
    format_table,
    free_port,
    git_output,
    ingest_item,
    unlimited_catalog,
    write_result,
)

PRODUCER = "bench"
# The digest workloads: the type each sends (``bench/digests.py``'s catalog), and among how
# many recipients their pairs are spread.
DIGEST_WORKLOADS = {"digest": digests.DIGEST_TYPE, "digest-plain": digests.PLAIN_TYPE}
DIGEST_RECIPIENTS = 2000
WORKLOADS = ("ingest", "delivery", *DIGEST_WORKLOADS)
VALGRIND = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
START_TIMEOUT_S = 600.0
DRAIN_TIMEOUT_S = 900.0
# How long a stopped delivery worker may take to return under valgrind (its grace for
# sends in flight is 10 s), and the workload's exit status when it takes longer.
STOP_TIMEOUT_S = 120.0
STOP_HUNG = 3


# --- the workloads, each run in a child process under callgrind ------------------------------


def _bodies(units: int, tag: str, kind: str = "ingest") -> list[bytes]:
    """``units`` batch bodies of the ingest benchmark's items (``bench/ingest.py``), or for
    the digest workloads of ``bench/digests.py``'s (one batch per 1000 pairs)."""
    if kind in DIGEST_WORKLOADS:
        type_name = DIGEST_WORKLOADS[kind]
        sets = digests.pair_sets(type_name, units * BATCH_SIZE, DIGEST_RECIPIENTS, BATCH_SIZE)
        return [f"{tag}-{number}".encode().join(pieces) for number, pieces in enumerate(sets)]
    pieces = batch_pieces(BATCH_SIZE, ingest_item)
    return [f"{tag}-{number}".encode().join(pieces) for number in range(units)]


async def _workload(kind: str, units: int, redis_url: str, catalog_path: Path) -> None:
    import msgspec  # noqa: PLC0415

    from app.api.schemas import BatchRequestSchema  # noqa: PLC0415
    from app.catalog import load_catalog  # noqa: PLC0415
    from app.delivery.worker import DeliveryWorker  # noqa: PLC0415
    from app.ingest.fanout import Planner  # noqa: PLC0415
    from app.ingest.ingestor import Ingestor  # noqa: PLC0415
    from app.logging import configure_logging  # noqa: PLC0415
    from app.providers.registry import build_providers  # noqa: PLC0415
    from streams.core.connection import connect  # noqa: PLC0415
    from streams.core.keys import KeySpace  # noqa: PLC0415

    configure_logging("console", "WARNING")
    redis = connect(redis_url)
    keys = KeySpace("bench")
    catalog = load_catalog(catalog_path)
    ingestor = Ingestor(redis, keys, Planner(catalog, BENCH_DIGEST), 3600)
    decoder = msgspec.json.Decoder(BatchRequestSchema)

    async def accept(bodies: list[bytes]) -> int:
        """Accept ``bodies``: how many deliveries they queued (for ``digest``: how many of
        them joined a digest, each one's answer naming it)."""
        counted = b'"digest":' if kind == "digest" else b'"QUEUED"'
        queued = 0
        for body in bodies:
            items = decoder.decode(body).notifications
            outcomes = await ingestor.ingest_many(PRODUCER, [(i.idempotency_key, i) for i in items])
            queued += sum(o.response.count(counted) for o in outcomes)
        return queued

    def new_worker() -> DeliveryWorker:
        return DeliveryWorker(
            redis,
            keys,
            catalog,
            build_providers(catalog, redis, keys),
            consumer="bench",
            address_digest=BENCH_DIGEST,
        )

    def new_feeder() -> Any:
        """What moves queued work items into the work streams, as a worker process runs it
        beside its delivery worker (None for a checkout from before producers' fair
        shares, whose ingest writes the work streams itself)."""
        try:
            from app.delivery.feeder import Feeder  # noqa: PLC0415 (the measured checkout's)
        except ImportError:
            return None
        feeder = Feeder(redis, catalog.fairness)
        return lambda stop: feeder.run(keys.all_shards(), stop)

    # A warm-up batch, not counted: scripts loaded, caches filled, the worker path run once;
    # for the digest workloads, a pass over the pairs measured (their digests opened).
    warm_up = await accept(_bodies(units if kind in DIGEST_WORKLOADS else 1, "warm-up", kind))
    if kind == "delivery":
        warming = _Running(new_worker(), new_feeder())
        await _drain(warming, redis, keys.sandbox_sent, warm_up)
        await warming.stop()
    _tune_gc_as_the_processes_do()
    bodies = _bodies(units, "measured", kind)
    queued = await accept(bodies) if kind == "delivery" else 0
    _handshake("ready")
    if kind != "delivery":
        joined = await accept(bodies)
        count = joined if kind == "digest" else units * BATCH_SIZE  # joins as they answered
        _handshake(f"done {count}")
    else:
        measured = _Running(new_worker(), new_feeder())
        count = await _drain(measured, redis, keys.sandbox_sent, warm_up + queued)
        _handshake(f"done {count}")  # the worker's stop is not counted
        await measured.stop()
    await redis.aclose()


def _tune_gc_as_the_processes_do() -> None:
    try:
        from app.processes.gc_tuning import tune_gc  # noqa: PLC0415 (the measured checkout's)
    except ImportError:  # a checkout from before the API and workers tuned the collector
        return
    tune_gc()


class _Running:
    """A delivery worker and its feeder (``feed``, if any) running until ``stop``."""

    def __init__(self, worker: Any, feed: Any) -> None:
        self.worker = worker
        self.stop_feeding = asyncio.Event()
        self.tasks = [asyncio.create_task(worker.run())]
        if feed is not None:
            self.tasks.append(asyncio.create_task(feed(self.stop_feeding)))

    async def stop(self) -> None:
        """Stop both. A worker that has not stopped within ``STOP_TIMEOUT_S`` is a finding:
        the stack of every unfinished task goes to stderr (``measure`` keeps it), and the
        process exits with ``STOP_HUNG`` (the counts, taken before, stand)."""
        self.worker.stop()
        self.stop_feeding.set()
        _, pending = await asyncio.wait(self.tasks, timeout=STOP_TIMEOUT_S)
        if not pending:
            return
        print(f"the delivery worker did not stop within {STOP_TIMEOUT_S:.0f} s", file=sys.stderr)
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                print(f"--- {task!r}", file=sys.stderr)
                task.print_stack(file=sys.stderr)
        sys.stderr.flush()
        os._exit(STOP_HUNG)


async def _drain(running: _Running, redis: Any, sent_stream: str, expected: int) -> int:
    """Let ``running`` deliver until the sandbox has recorded ``expected`` calls in all; how
    many of them it made."""
    before = await redis.xlen(sent_stream)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while await redis.xlen(sent_stream) < expected:  # polls Redis
        if time.monotonic() > deadline:
            raise BenchError(f"fewer than {expected} sends within {DRAIN_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.01)
    return int(await redis.xlen(sent_stream)) - int(before)


def _handshake(line: str) -> None:
    """Tell the parent where we are and wait for its go-ahead."""
    print(line, flush=True)
    sys.stdin.readline()


# --- the parent: private Redis, callgrind control, results -----------------------------------


def _control(pid: int, *options: str) -> None:
    done = subprocess.run(
        ["callgrind_control", *options, str(pid)], capture_output=True, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"callgrind_control {' '.join(options)} failed: {done.stderr!r}")


def _instructions(out_file: Path) -> int:
    """The instructions counted in a callgrind output file (all its parts)."""
    total = 0
    for path in out_file.parent.glob(out_file.name + "*"):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total


def _read_line(process: subprocess.Popen[str], what: str) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line:
        raise BenchError(f"{what} ended early (exit status {process.wait()})")
    return line


@contextmanager
def _private_redis(work: Path) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise BenchError("redis-server is not installed")
    port = free_port()
    out = work / f"redis-{port}.cg"
    process = subprocess.Popen(
        [*VALGRIND, f"--callgrind-out-file={out}", binary, "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(work)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        _wait_for_redis(port, process)
        yield f"redis://127.0.0.1:{port}/0", process, out
    finally:
        process.terminate()
        process.wait(timeout=120)


def _wait_for_redis(port: int, process: subprocess.Popen[str]) -> None:
    import redis  # noqa: PLC0415

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError("redis-server under valgrind exited at start")
        try:
            redis.Redis(port=port).ping()
            return
        except redis.ConnectionError:
            time.sleep(0.2)
    raise BenchError("redis-server under valgrind did not answer")


def measure(kind: str, units: int, source: Path, catalog: Path, work: Path) -> dict[str, Any]:
    """Run one workload; its counted instructions, Python's and Redis's."""
    with _private_redis(work) as (redis_url, redis_process, redis_out):
        python_out = work / f"python-{kind}.cg"
        errors = work / f"python-{kind}.stderr"
        env = {**os.environ, "CLARION_BENCH_SOURCE": str(source)}
        child = subprocess.Popen(
            [*VALGRIND, f"--callgrind-out-file={python_out}", f"--log-file={work}/valgrind.log",
             sys.executable, __file__, "--workload", kind, "--units", str(units),
             "--redis-url", redis_url, "--catalog", str(catalog)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors.open("w"),
            text=True, env=env, cwd=source,
        )  # fmt: skip
        assert child.stdin is not None
        try:
            if _read_line(child, f"the {kind} workload") != "ready":
                raise BenchError(f"the {kind} workload did not get ready")
            _control(child.pid, "--instr=on")
            _control(redis_process.pid, "--instr=on")
            started = time.monotonic()
            child.stdin.write("go\n")
            child.stdin.flush()
            done = _read_line(child, f"the {kind} workload")
            seconds = time.monotonic() - started
            _control(child.pid, "--instr=off")
            _control(redis_process.pid, "--instr=off")
            _control(redis_process.pid, "--dump")
            child.stdin.write("end\n")
            child.stdin.flush()
            child.wait(timeout=600)
        finally:
            if child.poll() is None:
                child.kill()
    count = int(done.split()[1])
    python, redis = _instructions(python_out), _instructions(redis_out)
    hung = child.returncode == STOP_HUNG
    if hung:  # counted before the stop: the figures stand, the finding is reported
        print(f"{kind}: {errors.read_text()}", flush=True)
    return {
        "worker_stop_hung": errors.read_text()[-20_000:] if hung else None,
        "count": count,
        "unit": "delivery" if kind == "delivery" else "notification",
        "python_instructions": python,
        "redis_instructions": redis,
        "python_per_unit": round(python / max(1, count)),
        "redis_per_unit": round(redis / max(1, count)),
        "seconds_under_valgrind": round(seconds, 1),
    }


def measure_runs(
    kind: str, runs: int, units: int, source: Path, catalog: Path, work: Path
) -> dict[str, Any]:
    """Run one workload ``runs`` times (each in a directory of its own): the median run's
    figures, every run's counts per unit, and their spread (largest minus smallest, in per
    cent of the median): counts of the same code differ by a per cent or two from run to
    run, so a difference smaller than the spread means nothing."""
    results = []
    for run in range(runs):
        directory = work / f"{kind}-{run}"
        directory.mkdir()
        results.append(measure(kind, units, source, catalog, directory))
    results.sort(key=lambda result: result["python_per_unit"] + result["redis_per_unit"])
    median = results[len(results) // 2]
    spread = {}
    for side in ("python", "redis"):
        counts = [result[f"{side}_per_unit"] for result in results]
        spread[side] = round(
            (max(counts) - min(counts)) / max(1, median[f"{side}_per_unit"]) * 100, 2
        )
    per_run = [
        {"python_per_unit": r["python_per_unit"], "redis_per_unit": r["redis_per_unit"]}
        for r in results
    ]
    # A product finding, not a measuring error: how many runs' workers did not stop.
    hangs = sum(1 for result in results if result["worker_stop_hung"])
    return {**median, "runs": per_run, "spread_pct": spread, "worker_stop_hangs": hangs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, default=2, help="batches of 1000 notifications")
    parser.add_argument("--runs", type=int, default=3, help="runs of each workload (median kept)")
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout whose code is measured (default: this one)")  # fmt: skip
    parser.add_argument("--workloads", default="ingest,delivery",
                        help=f"which, comma-separated, of {', '.join(WORKLOADS)} "
                        "(default ingest,delivery)")  # fmt: skip
    parser.add_argument("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument("--catalog", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workload:  # the child
        import uvloop  # noqa: PLC0415

        uvloop.run(_workload(args.workload, args.units, args.redis_url, args.catalog))
        return 0
    kinds = [kind.strip() for kind in args.workloads.split(",") if kind.strip()]
    if unknown := [kind for kind in kinds if kind not in WORKLOADS]:
        parser.error(f"--workloads: no workload {', '.join(unknown)} (there are {WORKLOADS})")
    return _parent(args.units, args.source.resolve(), max(1, args.runs), kinds)


def _parent(units: int, source: Path, runs: int, kinds: list[str]) -> int:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (with callgrind_control) is not installed", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    redis_version = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, check=False
    )
    result: dict[str, Any] = {
        "benchmark": "instructions",
        "started_utc": started.isoformat(timespec="seconds"),
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "redis_server": redis_version.stdout.strip(),
        },
        # Which code was measured, by commit: a directory name would only mean something on
        # the machine that ran it.
        "source": "this checkout" if source == REPO else "another checkout (--source)",
        "source_commit": (
            git_output("-C", str(source), "rev-parse", "--short", "HEAD") or ""
        ).strip(),
        "notifications": units * BATCH_SIZE,
        "runs": runs,
        "workloads": {},
    }
    with tempfile.TemporaryDirectory(prefix="clarion-instructions-") as temp:
        work = Path(temp)
        catalog = work / "clarion.toml"
        unlimited_catalog(REPO / "clarion.toml", catalog)
        digest_catalog = work / "digests.toml"  # with the digest workloads' two types
        digests.write_catalog(digest_catalog, "10m")
        for kind in kinds:
            print(f"{kind}: {units * BATCH_SIZE:,} notifications under callgrind, {runs} "
                  "run(s) ...", flush=True)  # fmt: skip
            used = digest_catalog if kind in DIGEST_WORKLOADS else catalog
            result["workloads"][kind] = measure_runs(kind, runs, units, source, used, work)
    plural = {"notification": "notifications", "delivery": "deliveries"}
    rows = [
        [kind, f"{w['count']:,} {plural[w['unit']]}", f"{w['python_per_unit']:,}",
         f"{w['spread_pct']['python']:.2f} %", f"{w['redis_per_unit']:,}",
         f"{w['spread_pct']['redis']:.2f} %", f"{w['python_per_unit'] + w['redis_per_unit']:,}"]
        for kind, w in result["workloads"].items()
    ]  # fmt: skip
    print(
        f"\nInstructions counted by callgrind (the median of {runs} run(s), and the spread "
        f"between runs); code of {result['source']} ({result['source_commit']})\n"
    )
    header = ["workload", "measured", "Python per unit", "spread", "Redis per unit", "spread",
              "total"]  # fmt: skip
    print(format_table(header, rows))
    for kind, workload in result["workloads"].items():
        if workload.get("worker_stop_hangs"):
            print(
                f"\nFINDING: in {workload['worker_stop_hangs']} of {runs} {kind} run(s) the "
                f"delivery worker did not stop within {STOP_TIMEOUT_S:.0f} s (counts taken "
                "before; the tasks' stacks are in the result)"
            )
    write_result("instructions", result, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
