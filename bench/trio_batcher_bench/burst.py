"""The ``burst`` scenario: 200 clients inside 50 ms, admission windows on vs off.

The same burst goes through a batching proxy (windows of 16 / 10 ms, 16 upstream calls at
once) and a plain one, traced: the simulator's in-flight gauge polled every 5 ms, the
proxy's ``/metrics`` every 10 ms, and the exact upstream call intervals from the
simulator's traces (``Phase.sim_after``). Then one client alone measures what a window
costs a lone request (``window-cost-*``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

import trio

from .figures import delta as _delta
from .figures import round3 as _round
from .harness import Bench, Phase, monotonic_offset, target_for, target_result
from .load import Run, Tally, closed_driver, open_loop
from .processes import Stack, running_stack
from .results import Check, PhaseResult, ScenarioResult
from .wire import Pool, encode_request, get_json

__all__ = ["BATCH_SLACK_MS", "run_burst"]

BATCH_SLACK_MS: Final = 2.0  # target: a window adds at most BATCH_MAX_WAIT_MS + this

_SIM_POLL_S: Final = 0.005
_PROXY_POLL_S: Final = 0.010

_BATCH: Final = {
    "BATCH_ENABLED": "1",
    "BATCH_MAX_SIZE": "16",
    "BATCH_MAX_WAIT_MS": "10",
    "BATCH_MAX_CONCURRENCY": "16",
}


def _table(columns: Sequence[str], rows: list[list[Any]]) -> dict[str, Any]:
    return {"columns": list(columns), "rows": rows}


def _ms_since(t0: float, t: float) -> float:
    return round((t - t0) * 1000.0, 3)


def _steps(intervals: list[tuple[float, float]]) -> list[list[float]]:
    """[start, end] intervals → the exact in-flight step function as [[t, n], ...]."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    level, points = 0, [[0.0, 0]]
    for t, change in events:
        level += change
        if points[-1][0] == t:
            points[-1][1] = level
        else:
            points.append([t, level])
    return [[round(t, 3), n] for t, n in points]


async def _burst_once(
    bench: Bench, scenario: ScenarioResult, stack: Stack, proxy: str, clients: int, spread: float
) -> tuple[Phase, dict[str, Any]]:
    """``clients`` requests inside ``spread`` seconds through one proxy, traced."""
    server = stack.proxies[proxy]
    target = target_for("proxy", server.url)
    pool = Pool(target.host, target.port)
    sim_host, _, sim_port = stack.sim.url.removeprefix("http://").rpartition(":")
    sim_poll = Pool(sim_host, int(sim_port))
    proxy_poll = Pool(target.host, target.port)
    sim_req = encode_request("GET", sim_host, int(sim_port), "/_sim/stats?recent=0", [], b"")
    metrics_req = encode_request("GET", target.host, target.port, "/metrics", [], b"")
    rate = clients / spread
    sim_polls: list[tuple[float, int]] = []
    proxy_polls: list[tuple[float, dict[str, Any]]] = []
    zero: list[float] = []  # trio time of the first intended send

    async def drive(tally: Tally) -> Run:
        start = trio.current_time() + 0.02
        zero.append(start)
        return await open_loop(
            pool, target, rate=rate, count=clients, max_in_flight=clients, max_lag=10.0,
            tally=tally, start_at=start,
        )  # fmt: skip

    async def poll_sim() -> None:
        while True:
            stats: Any = await get_json(sim_poll, sim_req)
            sim_polls.append((time.monotonic(), int(stats["in_flight"])))
            await trio.sleep(_SIM_POLL_S)

    async def poll_proxy() -> None:
        while True:
            snapshot: Any = await get_json(proxy_poll, metrics_req)
            proxy_polls.append((time.monotonic(), snapshot))
            await trio.sleep(_PROXY_POLL_S)

    async def pollers() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll_sim)
            nursery.start_soon(poll_proxy)

    try:
        await pool.prefill(clients)
        await sim_poll.prefill(1)
        await proxy_poll.prefill(1)
        warm = target_for("proxy", server.url, text="[[sim:ttft_ms=1]] warm-up")
        await open_loop(pool, warm, rate=rate, count=clients, max_in_flight=clients)
        phase = await bench.measure(
            scenario,
            stack,
            f"burst-{proxy}",
            drive,
            target=target,
            proxy=proxy,
            label=f"burst-{proxy}: {clients} clients in {spread * 1000:g} ms",
            recent=clients,
            bucket=0.1,
            concurrent=pollers,
        )
    finally:
        for p in (pool, sim_poll, proxy_poll):
            await p.aclose()

    offset = monotonic_offset()
    t0 = zero[0] + offset  # time.monotonic() of the first intended send
    requests = sorted(
        [
            _ms_since(t0, o.intended + offset),
            _ms_since(t0, o.sent + offset),
            _ms_since(t0, o.done + offset),
            o.status,
        ]
        for o in phase.run.outcomes
    )
    calls = sorted(
        (_ms_since(t0, tr["started_at"]), _ms_since(t0, tr["finished_at"]), tr["status"])
        for tr in phase.sim_after["recent"]
        if tr["finished_at"] is not None
    )
    windows: list[list[Any]] = []
    prev: dict[str, int] | None = None
    proxy_rows = []
    for t, snap in proxy_polls:
        by_reason = {k: int(v) for k, v in snap["windows"]["by_reason"].items()}
        conc = snap["concurrency"]
        proxy_rows.append(
            [
                _ms_since(t0, t),
                conc["active"],
                conc["upstream_in_flight"],
                by_reason.get("size", 0),
                by_reason.get("time", 0),
            ]
        )
        if prev is not None:
            flushed = {k: by_reason.get(k, 0) - prev.get(k, 0) for k in by_reason}
            if any(flushed.values()):
                windows.append([_ms_since(t0, t), flushed.get("size", 0), flushed.get("time", 0)])
        prev = by_reason
    trace = {
        "proxy": proxy,
        "settings": dict(server.env),
        "clients": clients,
        "spread_ms": spread * 1000,
        "time_zero": "the first client's intended send time; every time below is ms after it",
        "requests": _table(["intended_ms", "sent_ms", "done_ms", "status"], requests),
        "upstream_calls": _table(["start_ms", "end_ms", "status"], [list(c) for c in calls]),
        "upstream_in_flight": _table(
            ["t_ms", "in_flight"], _steps([(float(s), float(e)) for s, e, _ in calls])
        ),
        "sim_polls": _table(["t_ms", "in_flight"], [[_ms_since(t0, t), n] for t, n in sim_polls]),
        "proxy_polls": _table(
            ["t_ms", "active", "upstream_in_flight", "windows_size_total", "windows_time_total"],
            proxy_rows,
        ),
        "window_flushes": _table(["t_ms", "size_flushes", "time_flushes"], windows),
    }
    return phase, trace


def _windowsdelta(phase: Phase) -> dict[str, Any]:
    before, after = phase.metrics_before, phase.metrics_after
    if before is None or after is None:
        return {}
    reasons = after["windows"]["by_reason"]
    delta = {k: int(v) - int(before["windows"]["by_reason"].get(k, 0)) for k, v in reasons.items()}
    flushed = sum(delta.values())
    return {"flushed": flushed, "by_reason": delta}


async def run_burst(bench: Bench, scenario: ScenarioResult) -> None:
    clients, spread = 200, 0.050
    cap = int(_BATCH["BATCH_MAX_CONCURRENCY"])
    max_wait = float(_BATCH["BATCH_MAX_WAIT_MS"])
    sim_args = ["--ttft-ms", "100", "--tokens-per-s", "0"]
    proxies: dict[str, dict[str, str]] = {"batched": dict(_BATCH), "unbatched": {}}
    scenario.config = {"simulator": sim_args, "proxies": proxies, "clients": clients}
    opts = bench.options
    cost_s = min(opts.phase_s, 2.0 if opts.quick else 10.0)
    async with running_stack(sim_args, proxies, opts.log_dir / "burst") as stack:
        bursts = {}
        for proxy in ("batched", "unbatched"):
            bursts[proxy] = await _burst_once(bench, scenario, stack, proxy, clients, spread)
        # What a window costs a lone request: one client, so every window waits max_wait.
        costs: dict[str, PhaseResult] = {}
        for proxy in ("batched", "unbatched"):
            target = target_for(
                "proxy", stack.proxies[proxy].url, text="[[sim:ttft_ms=20]] window cost"
            )
            pool = Pool(target.host, target.port)
            try:
                await bench.warmup(pool, target, 1, min(opts.warmup_s, 0.5))
                phase = await bench.measure(
                    scenario,
                    stack,
                    f"window-cost-{proxy}",
                    closed_driver(pool, target, 1, cost_s),
                    target=target,
                    proxy=proxy,
                    label=f"window-cost-{proxy}: 1 client, closed loop",
                    seconds=cost_s,
                )
            finally:
                await pool.aclose()
            costs[proxy] = phase.result

    summary: dict[str, Any] = {"clients": clients, "spread_ms": spread * 1000, "cap": cap}
    for proxy, (phase, trace) in bursts.items():
        result = phase.result
        requests = trace["requests"]["rows"]
        summary[proxy] = {
            "upstream_max_in_flight": result.upstream.max_in_flight,
            "makespan_ms": max((r[2] for r in requests), default=None),
            "latency_p50_ms": result.latency_ms.p50,
            "latency_p99_ms": result.latency_ms.p99,
            "windows": _windowsdelta(phase),
        }
        scenario.traces[proxy] = trace
    batched = bursts["batched"][0].result
    scenario.checks.append(
        Check(
            "burst-batched: upstream in-flight never exceeds BATCH_MAX_CONCURRENCY",
            batched.upstream.max_in_flight <= cap,
            f"<= {cap}",
            batched.upstream.max_in_flight,
            "the simulator's peak in-flight gauge during the burst",
        )
    )
    added = _delta(costs["unbatched"].latency_ms.p50, costs["batched"].latency_ms.p50)
    summary["window_cost_p50_ms"] = _round(added)
    summary["window_cost_p99_ms"] = _round(
        _delta(costs["unbatched"].latency_ms.p99, costs["batched"].latency_ms.p99)
    )
    scenario.summary = summary
    scenario.targets.append(
        target_result(
            "latency batching adds to a lone request (p50)",
            f"<= BATCH_MAX_WAIT_MS + {BATCH_SLACK_MS:g} = {max_wait + BATCH_SLACK_MS:g} ms",
            added,
            "ms",
            lambda v: v <= max_wait + BATCH_SLACK_MS,
        )
    )
