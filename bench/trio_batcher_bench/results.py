"""The benchmark report's data model: what ``latest.json`` holds (see docs/benchmarks.md).

Plain dataclasses, turned into JSON with ``dataclasses.asdict``; every duration in the
report is milliseconds, every rate per second, every utilisation in cores (1.0 = one core).
``SCHEMA`` names the format; it changes when a field changes meaning or disappears.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Final, final

__all__ = [
    "SCHEMA",
    "Check",
    "Counts",
    "Cpu",
    "EventStats",
    "PhaseResult",
    "Rates",
    "Report",
    "ScenarioResult",
    "Summary",
    "TargetResult",
    "Upstream",
]

SCHEMA: Final = "trio-batcher-bench/1"


@final
@dataclass(frozen=True)
class Summary:
    """A latency distribution in milliseconds; nearest-rank percentiles (``None`` if empty)."""

    count: int
    mean: float | None
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None


@final
@dataclass(frozen=True)
class Counts:
    """Requests by how they ended. ``offered = sent + unsent_late + unsent_bound``;
    ``sent = ok + shed + error + aborted``."""

    offered: int
    sent: int
    ok: int
    shed: int
    error: int
    aborted: int
    unsent_late: int
    unsent_bound: int
    errors_by_code: dict[str, int]


@final
@dataclass(frozen=True)
class Rates:
    """Per second. ``offered`` is an open loop's arrival rate (a closed loop's sends per
    second of wall time); ``goodput`` and ``shed`` are per second of the phase's wall time,
    from the first send until the last answer."""

    offered: float
    goodput: float
    shed: float


@final
@dataclass(frozen=True)
class Upstream:
    """What the simulator saw during the phase (deltas of ``/_sim/stats``)."""

    requests: int
    max_in_flight: int
    completed: int
    abandoned: int
    errors: int


@final
@dataclass(frozen=True)
class Cpu:
    """Utilisation in cores over the phase. ``proxy_ms_per_request`` divides the proxy's CPU
    time by the requests it answered (shed ones included), ``simulator_ms_per_request`` the
    simulator's by the requests it received, ``client_ms_per_request`` the load generator's by
    the requests it sent."""

    proxy_ms_per_request: float | None
    simulator_ms_per_request: float | None
    client_ms_per_request: float | None
    proxy_util: float | None
    simulator_util: float | None
    client_util: float | None
    machine_util: float | None
    other_util: float | None


@final
@dataclass(frozen=True)
class EventStats:
    """Every SSE event of a streaming phase's successful streams, whatever its kind
    (``message_start``, ``ping``, a content delta, ``data: [DONE]``...), as the clients
    received them; an event counts when the blank line that ends it arrives.

    ``per_stream`` and ``bytes_per_stream`` are ``[min, max]`` over the streams (equal when
    every stream carried the same events); ``bytes`` are the body's, without the chunked
    framing. ``gap_ms``: gaps between consecutive events of a stream (0 for events that
    arrived in one piece). ``mean_arrival_ms[i]``: the mean time from the send to event
    ``i``, and ``mean_content_arrival_ms[j]`` to content event ``j``, each over the streams
    with the most common count (so a phase's event ``i`` can be compared with another's).
    """

    total: int
    per_s: float  # events received per second of the phase's wall time
    per_stream: list[int]
    bytes_per_stream: list[int]
    gap_ms: Summary
    mean_arrival_ms: list[float]
    mean_content_arrival_ms: list[float]


@final
@dataclass(frozen=True)
class TimelinePoint:
    """One bucket of a phase, by intended send time: ``t`` is the bucket's start (s)."""

    t: float
    offered: int
    ok: int
    shed: int
    error: int
    p50_ms: float | None
    p99_ms: float | None


@final
@dataclass(frozen=True)
class PhaseResult:
    """One load phase: a driver against one target with one configuration."""

    name: str
    via: str  # "simulator" | "proxy"
    proxy: str | None  # which proxy of the scenario, if via the proxy
    mode: str  # "closed" | "open"
    stream: bool
    concurrency: int | None
    rate_per_s: float | None
    wall_s: float
    counts: Counts
    rates: Rates
    latency_ms: Summary  # successful requests, from the intended send time
    ttft_ms: Summary | None  # streams: intended send time to the first content event
    itl_ms: Summary | None  # streams: gaps between content events
    send_lag_ms: Summary | None  # open loop: actual minus intended send time
    proxy_timing_ms: dict[str, Summary] | None  # from the proxy's Server-Timing header
    upstream: Upstream
    cpu: Cpu
    timeline: list[TimelinePoint] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    events: EventStats | None = None  # streams: every SSE event, not only content


@final
@dataclass(frozen=True)
class Check:
    """A must-hold fact; any failed check fails the scenario and the command."""

    name: str
    ok: bool
    expected: Any
    actual: Any
    detail: str = ""


@final
@dataclass(frozen=True)
class TargetResult:
    """A performance target: reported, not enforced (shared machines are noisy)."""

    name: str
    target: str
    actual: float | None
    unit: str
    met: bool | None


@final
@dataclass
class ScenarioResult:
    name: str
    title: str
    description: str
    config: dict[str, Any]
    phases: list[PhaseResult] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    targets: list[TargetResult] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    traces: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and all(check.ok for check in self.checks)

    def phase(self, name: str) -> PhaseResult:
        return next(p for p in self.phases if p.name == name)


@final
@dataclass
class Report:
    created_at: str
    command: str
    quick: bool
    machine: dict[str, Any]
    scenarios: list[ScenarioResult]
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.scenarios)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "created_at": self.created_at,
            "command": self.command,
            "quick": self.quick,
            "ok": self.ok,
            "duration_s": round(self.duration_s, 3),
            "machine": self.machine,
            "scenarios": {s.name: {"ok": s.ok, **dataclasses.asdict(s)} for s in self.scenarios},
        }
