"""The ``tenants`` scenario's arithmetic, as plain functions of what the clients saw.

Kept apart from the scenario (``tenants.py``) so it is tested as data: a tenant's outcomes
summarised (statuses by code, latency), the admissions each tenant got inside a window of
saturation, their ratio against the weights, and the scenario's targets from those numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .harness import target_result
from .load import Outcome
from .results import TargetResult
from .stats import parse_server_timing, summary_ms

__all__ = [
    "MAX_SLOWDOWN",
    "RATIO_TOLERANCE",
    "admitted_between",
    "cumulative_admissions",
    "queue_ms",
    "request_rows",
    "statuses",
    "tenant_summary",
    "tenants_targets",
    "weighted_share",
]

MAX_SLOWDOWN: Final = 2.0  # the quiet tenant's p50 under a flood, at most this × unloaded
RATIO_TOLERANCE: Final = 0.10  # admitted ratio within ±10% of the weights' ratio


def statuses(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """Outcomes by status and error code: ``{"200": 116, "429 queue_full": 184}``; a request
    that got no HTTP status is ``"0 <what happened>"``."""
    counted = Counter(
        str(o.status) if o.status == 200 else f"{o.status} {o.code or 'no_code'}" for o in outcomes
    )
    return dict(sorted(counted.items()))


def queue_ms(outcome: Outcome) -> float | None:
    """The time the proxy says the request waited for a gate slot (its Server-Timing
    ``queue``, ms), or ``None`` when the answer did not say."""
    if outcome.server_timing is None:
        return None
    return parse_server_timing(outcome.server_timing).get("queue")


def tenant_summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """One tenant's requests in a phase: how many, how they ended, the latency of the
    successful ones (ms from the intended send time) and the part of it they waited for a
    slot (``queue_p50_ms``, from Server-Timing)."""
    ok = [o.latency for o in outcomes if o.kind == "ok"]
    latency = summary_ms(ok)
    waits = [w / 1000.0 for o in outcomes if o.kind == "ok" and (w := queue_ms(o)) is not None]
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "shed": sum(1 for o in outcomes if o.kind == "shed"),
        "error": sum(1 for o in outcomes if o.kind in ("error", "aborted")),
        "statuses": statuses(outcomes),
        "latency_p50_ms": latency.p50,
        "latency_p99_ms": latency.p99,
        "latency_max_ms": latency.max,
        "queue_p50_ms": summary_ms(waits).p50,
    }


def request_rows(by_tenant: Mapping[str, Sequence[Outcome]], zero: float) -> dict[str, Any]:
    """Every request of a phase, in order of intended send: its tenant, when it was meant
    to leave and when it was answered (ms after ``zero``, trio clock), its status and its
    wait for a slot (ms, ``None`` if not said)."""

    def ms(t: float) -> float:
        return round((t - zero) * 1000.0, 3)

    rows: list[list[Any]] = [
        [tenant, ms(o.intended), ms(o.done), o.status, queue_ms(o)]
        for tenant, outcomes in by_tenant.items()
        for o in outcomes
    ]
    rows.sort(key=lambda row: (row[1], row[0]))
    return {"columns": ["tenant", "intended_ms", "done_ms", "status", "queue_ms"], "rows": rows}


def admitted_between(
    by_tenant: Mapping[str, Sequence[Outcome]], start: float, end: float
) -> dict[str, int]:
    """Successful requests of each tenant that finished within ``[start, end)``.

    Under saturation every slot is busy, so a completion is a slot handed on: counted over a
    window in which every tenant kept a backlog, completions are the admissions the fair
    order gave each tenant (the first slots, handed out before anyone queued, fall before
    ``start``; the drain after the load stops, after ``end``).
    """
    return {
        tenant: sum(1 for o in outcomes if o.kind == "ok" and start <= o.done < end)
        for tenant, outcomes in by_tenant.items()
    }


def weighted_share(admitted: Mapping[str, int], heavy: str, light: str) -> dict[str, Any]:
    """``heavy``'s admissions against ``light``'s: their ratio (``None`` when ``light`` got
    none) and ``heavy``'s share of both."""
    a, b = admitted.get(heavy, 0), admitted.get(light, 0)
    return {
        "ratio": None if b == 0 else round(a / b, 3),
        "share": None if a + b == 0 else round(a / (a + b), 4),
    }


def cumulative_admissions(
    by_tenant: Mapping[str, Sequence[Outcome]], zero: float, bucket: float = 0.1
) -> dict[str, Any]:
    """Each tenant's successful requests so far, at the end of every ``bucket`` seconds
    after ``zero`` (trio clock): ``{"columns": ["t_ms", tenant...], "rows": [...]}``, the
    slopes of which are the tenants' rates of admission."""
    tenants = list(by_tenant)
    done = {t: sorted(o.done - zero for o in by_tenant[t] if o.kind == "ok") for t in tenants}
    last = max((times[-1] for times in done.values() if times), default=0.0)
    rows: list[list[Any]] = []
    index = {t: 0 for t in tenants}
    steps = int(last // bucket) + 1
    for step in range(steps + 1):
        edge = step * bucket
        row: list[Any] = [round(edge * 1000.0, 3)]
        for t in tenants:
            times = done[t]
            while index[t] < len(times) and times[index[t]] <= edge:
                index[t] += 1
            row.append(index[t])
        rows.append(row)
    return {"columns": ["t_ms", *tenants], "rows": rows}


def tenants_targets(
    *,
    quiet_unloaded_p50_ms: float | None,
    quiet_loaded_p50_ms: float | None,
    quiet_shed: int,
    flood_shed: int,
    ratio: float | None,
    weights: tuple[float, float],
) -> list[TargetResult]:
    """The scenario's targets: the quiet tenant keeps its latency and is never shed, the
    flooding one absorbs the shedding, and admissions under saturation follow the weights.
    """
    slowdown = (
        None
        if quiet_unloaded_p50_ms is None
        or quiet_loaded_p50_ms is None
        or quiet_unloaded_p50_ms <= 0
        else quiet_loaded_p50_ms / quiet_unloaded_p50_ms
    )
    want = weights[0] / weights[1]
    low, high = want * (1 - RATIO_TOLERANCE), want * (1 + RATIO_TOLERANCE)
    return [
        target_result(
            "quiet tenant's p50 during the flood, against its p50 alone",
            f"<= {MAX_SLOWDOWN:g}x",
            slowdown,
            "x",
            lambda v: v <= MAX_SLOWDOWN,
        ),
        target_result(
            "quiet tenant's requests shed during the flood",
            "0",
            quiet_shed,
            "requests",
            lambda v: v == 0,
        ),
        target_result(
            "flooding tenant's requests shed (it absorbs the shedding)",
            "> 0",
            flood_shed,
            "requests",
            lambda v: v > 0,
        ),
        target_result(
            f"admitted ratio under saturation with weights {weights[0]:g}:{weights[1]:g}",
            f"{want:g} ± {RATIO_TOLERANCE:.0%} ({low:.2f} to {high:.2f})",
            ratio,
            ":1",
            lambda v: low <= v <= high,
        ),
    ]
