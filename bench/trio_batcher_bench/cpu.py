"""CPU time of the benchmark's processes and of the whole machine, from ``/proc``.

``CpuMeter`` samples user+system CPU seconds of named processes (the proxy, the simulator,
the load generator itself) and of the machine at the start and end of a phase, so a phase
reports each one's utilisation (1.0 = one core busy) and what everything *else* on the
machine used meanwhile -- on a shared box, that is what makes a slow run explainable.
``/proc/<pid>/stat`` counts in clock ticks (10 ms), so per-request figures need a phase of
a few hundred requests at least. Without ``/proc`` (not Linux), psutil is used if installed;
otherwise the figures are ``None``.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, final

__all__ = ["CpuMeter", "CpuUsage", "process_cpu_seconds", "tree_cpu_seconds"]

_TICK: Final = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by ``pid`` (all its threads), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    except (OSError, IndexError, ValueError):
        pass
    try:
        # Any-typed on purpose: psutil ships no type stubs, and it is only a fallback.
        psutil: Any = importlib.import_module("psutil")
    except ImportError:
        return None
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def _children(pid: int) -> list[int]:
    """``pid``'s child processes, from each of its threads' ``children`` list."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found += [int(child) for child in f.read().split()]
        except (OSError, ValueError):
            continue
    return found


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of ``pid`` and every live descendant: a supervisor and its workers.

    A descendant that exited during the phase takes its time with it, so this is for
    processes that live through the phase (``serve --workers``), not short-lived ones.
    """
    total = process_cpu_seconds(pid)
    if total is None:
        return None
    pending = _children(pid)
    while pending:
        child = pending.pop()
        total += process_cpu_seconds(child) or 0.0
        pending += _children(child)
    return total


def machine_cpu_seconds() -> tuple[float, float] | None:
    """(busy, total) CPU seconds over all cores since boot, from ``/proc/stat``."""
    try:
        with open("/proc/stat", "rb") as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != b"cpu":
        return None
    values = [int(v) for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return (total - idle) / _TICK, total / _TICK


@final
@dataclass(frozen=True)
class CpuUsage:
    """Utilisation over a phase (1.0 = one core) and CPU seconds per process."""

    wall_s: float
    seconds: dict[str, float | None]
    util: dict[str, float | None]
    machine_util: float | None  # all cores together, e.g. 2.0 = both cores busy
    other_util: float | None  # the machine minus our processes


@final
class CpuMeter:
    """Measure named processes' CPU between ``start()`` and ``stop()``."""

    def __init__(self, pids: dict[str, int], *, trees: Collection[str] = ()) -> None:
        """``trees``: the names whose descendants count too (``tree_cpu_seconds``)."""
        self._pids = dict(pids)
        self._trees = frozenset(trees)
        self._start: dict[str, float | None] = {}
        self._machine: tuple[float, float] | None = None
        self._wall = 0.0

    def _seconds(self, name: str, pid: int) -> float | None:
        return tree_cpu_seconds(pid) if name in self._trees else process_cpu_seconds(pid)

    def start(self) -> None:
        self._wall = time.monotonic()
        self._start = {name: self._seconds(name, pid) for name, pid in self._pids.items()}
        self._machine = machine_cpu_seconds()

    def stop(self) -> CpuUsage:
        wall = max(1e-9, time.monotonic() - self._wall)
        seconds: dict[str, float | None] = {}
        for name, pid in self._pids.items():
            before, after = self._start.get(name), self._seconds(name, pid)
            seconds[name] = None if before is None or after is None else after - before
        util = {name: None if s is None else s / wall for name, s in seconds.items()}
        machine = machine_cpu_seconds()
        machine_util = other = None
        if machine is not None and self._machine is not None:
            machine_util = (machine[0] - self._machine[0]) / wall
            ours = sum(s for s in seconds.values() if s is not None)
            other = max(0.0, machine_util - ours / wall)
        return CpuUsage(wall, seconds, util, machine_util, other)
