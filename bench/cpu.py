"""CPU time of the processes behind a benchmark run, read from ``/proc`` (Linux only).

A benchmark takes a ``snapshot`` before and after its load; ``CpuSnapshot.used`` gives the
CPU seconds (user + system) each group of processes spent in between:

- a service started by the benchmark: the process and all its descendants (uvicorn's
  workers are children of ``clarion api``);
- Redis: the server whose ``process_id`` Redis itself reports;
- PostgreSQL: every process named ``postgres`` (backends come and go; only a server on this
  machine is seen).

Divided by the work done, that is what a notification or a delivery costs each part, and
how many cores a rate needs: the figure that tells whether a target fits a machine at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class _Process:
    parent: int
    name: str
    cpu_s: float


def _read_processes() -> dict[int, _Process]:
    processes: dict[int, _Process] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (name) state ppid ..."; the name may hold spaces and parentheses.
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        user, system = int(fields[11]), int(fields[12])
        processes[int(entry.name)] = _Process(int(fields[1]), name, (user + system) / _TICKS)
    return processes


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    """CPU seconds used so far by each group of processes."""

    seconds: dict[str, float]

    def used(self, since: CpuSnapshot) -> dict[str, float]:
        """CPU seconds each group used between ``since`` and this snapshot.

        A process that ended in between takes its time with it, so a group whose processes
        were replaced may show less than it used.
        """
        return {
            group: round(max(0.0, value - since.seconds.get(group, 0.0)), 3)
            for group, value in self.seconds.items()
        }


def redis_pid(info: dict[str, object]) -> int | None:
    """The pid of the Redis server whose ``INFO server`` this is, if it runs on this
    machine (a process of that pid named ``redis-server`` exists here); else None."""
    pid = info.get("process_id")
    if not isinstance(pid, int):
        return None
    process = _read_processes().get(pid)
    return pid if process is not None and process.name == "redis-server" else None


def snapshot(
    services: dict[str, list[int]], redis: int | None, *, postgres: bool = True
) -> CpuSnapshot:
    """CPU seconds so far of each named group of service processes (each with its
    descendants), of the Redis server of pid ``redis``, of all ``postgres`` processes, and
    of this process alone (the benchmark's own load generator: ``bench``)."""
    processes = _read_processes()
    children: dict[int, list[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process.parent, []).append(pid)

    def tree(root: int) -> float:
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in processes:
                total += processes[pid].cpu_s
            todo += children.get(pid, [])
        return total

    seconds = {name: sum(tree(pid) for pid in pids) for name, pids in services.items()}
    if redis is not None:
        seconds["redis"] = processes[redis].cpu_s if redis in processes else 0.0
    if postgres:
        seconds["postgresql"] = sum(p.cpu_s for p in processes.values() if p.name == "postgres")
    own = processes.get(os.getpid())
    seconds["bench"] = own.cpu_s if own is not None else 0.0
    return CpuSnapshot(seconds)
