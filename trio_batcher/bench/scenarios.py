"""The six scenarios: what each one starts, what load it drives, and what it concludes.

Each scenario starts its own simulator and proxies (``processes.running_stack``), so one
scenario's settings and counters never leak into another, and runs its phases through
``Bench.measure``. What is compared is always compared within one scenario, one run, on
the same machine at the same moment: the proxy against the simulator directly, batching
on against off. Absolute numbers on a shared 2-core machine move from run to run; the
ratios and differences are what the targets are about.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

import trio

from .cpu import CpuMeter
from .harness import LIGHT_CLIENTS, Bench, Phase, monotonic_offset, target_for, target_result
from .load import Abort, Run, Tally, Target, closed_driver, closed_loop, open_loop
from .processes import Stack, running_stack
from .ratelimit import run_ratelimit
from .results import Check, PhaseResult, ScenarioResult, Summary
from .stats import summary_ms
from .streaming import run_stream
from .wire import Pool, encode_request, get_json

__all__ = ["SCENARIOS", "Scenario"]

# Performance targets (issue 6); the stream scenario's is in streaming.py.
THROUGHPUT_RATIO_MIN: Final = 0.90
ADDED_P50_MAX_MS: Final = 5.0
PROXY_CPU_MAX_MS: Final = 1.0
BATCH_SLACK_MS: Final = 2.0

_SIM_POLL_S: Final = 0.005
_PROXY_POLL_S: Final = 0.010


@final
@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    description: str
    run: Callable[[Bench, ScenarioResult], Awaitable[None]]


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _ratio(a: float, b: float) -> float | None:
    return None if a <= 0 else b / a


# -- overhead -----------------------------------------------------------------------------


async def _overhead(bench: Bench, scenario: ScenarioResult) -> None:
    opts = bench.options
    workers = opts.concurrency or 50
    sim_args = ["--ttft-ms", "50", "--tokens-per-s", "0"]
    scenario.config = {
        "simulator": sim_args,
        "proxy": {},
        "clients": workers,
        "light_clients": LIGHT_CLIENTS,
    }
    async with running_stack(
        sim_args, {"proxy": {}}, opts.log_dir / "overhead", floor=True
    ) as stack:
        pair = await bench.measure_pair(scenario, stack, workers=workers, stream=False)
        direct, proxy = pair[0].result, pair[1].result
        floor = await _floor(bench, stack, workers)
        # The same at a load nothing saturates: what one request pays for the extra hop.
        light = await bench.measure_pair(
            scenario,
            stack,
            workers=LIGHT_CLIENTS,
            stream=False,
            names=(f"direct-{LIGHT_CLIENTS}", f"proxy-{LIGHT_CLIENTS}"),
            seconds=opts.phase_s / 2,
            warmup=min(opts.warmup_s, 0.5),
        )
        light_direct, light_proxy = light[0].result, light[1].result
        yardstick = await _health_cpu(
            stack, workers, min(1.0 if opts.quick else 3.0, opts.phase_s / 2)
        )
    ratio = _ratio(direct.rates.goodput, proxy.rates.goodput)
    added = _delta(direct.latency_ms.p50, proxy.latency_ms.p50)
    cpu = proxy.cpu.proxy_ms_per_request
    if floor is not None:
        # The same three figures for the floor server: what the stack allows at best.
        floor_ratio = _ratio(direct.rates.goodput, floor["goodput_per_s"] or 0.0)
        floor["throughput_ratio"] = None if floor_ratio is None else round(floor_ratio, 4)
        floor["added_p50_ms"] = _round(_delta(direct.latency_ms.p50, floor["p50_ms"]))
        floor["proxy_cpu_above_floor_ms"] = _round(_delta(floor["cpu_ms_per_request"], cpu))
        scenario.checks.append(
            Check("floor: every request answered 200", floor["failed"] == 0, 0, floor["failed"])
        )
    scenario.summary = {
        "clients": workers,
        "throughput_direct_per_s": direct.rates.goodput,
        "throughput_proxy_per_s": proxy.rates.goodput,
        "throughput_ratio": None if ratio is None else round(ratio, 4),
        "added_p50_ms": None if added is None else round(added, 3),
        "added_p99_ms": _round(_delta(direct.latency_ms.p99, proxy.latency_ms.p99)),
        "proxy_cpu_ms_per_request": cpu,
        "proxy_overhead_p50_ms": _timing(proxy, "overhead"),
        "light_clients": LIGHT_CLIENTS,
        "light_added_p50_ms": _round(
            _delta(light_direct.latency_ms.p50, light_proxy.latency_ms.p50)
        ),
        "light_proxy_cpu_ms_per_request": light_proxy.cpu.proxy_ms_per_request,
        "proxy_cpu_ms_per_health_request": yardstick,
        "floor": floor,
        "cpu_per_request_in_health_requests": (
            None if cpu is None or not yardstick else round(cpu / yardstick, 2)
        ),
    }
    scenario.targets += [
        target_result(
            f"throughput through the proxy vs direct at {workers} clients",
            f">= {THROUGHPUT_RATIO_MIN:.0%}",
            None if ratio is None else ratio * 100,
            "%",
            lambda v: v >= THROUGHPUT_RATIO_MIN * 100,
        ),
        target_result(
            "p50 latency the proxy adds",
            f"<= {ADDED_P50_MAX_MS:g} ms",
            added,
            "ms",
            lambda v: v <= ADDED_P50_MAX_MS,
        ),
        target_result(
            "proxy CPU per request",
            f"<= {PROXY_CPU_MAX_MS:g} ms",
            cpu,
            "ms",
            lambda v: v <= PROXY_CPU_MAX_MS,
        ),
    ]


async def _floor(bench: Bench, stack: Stack, workers: int) -> dict[str, Any] | None:
    """The direct load through the stack's floor server (``bench.floor``): what hypercorn
    and httpcore2 cost per request with none of the proxy's work, measured in the same run.
    """
    if stack.floor is None:
        return None
    opts = bench.options
    target = target_for("simulator", stack.floor.url)  # the same request as the direct phase
    bench.display.line(f"  floor: {workers} clients, closed loop, ~{opts.phase_s:g} s ...")
    run, used = await _metered_loop(
        target,
        {"floor": stack.floor.pid, "simulator": stack.sim.pid},
        workers=workers,
        seconds=opts.phase_s,
        warmup=opts.warmup_s,
    )
    ok = [o for o in run.outcomes if o.kind == "ok"]
    result = {
        "requests": len(ok),
        "failed": len(run.outcomes) - len(ok),
        "goodput_per_s": round(len(ok) / run.wall, 1) if run.wall > 0 else None,
        "p50_ms": summary_ms(o.latency for o in ok).p50,
        "cpu_ms_per_request": _ms_per(used["floor"], len(ok)),
        "simulator_cpu_ms_per_request": _ms_per(used["simulator"], len(ok)),
    }
    bench.display.line(
        f"  floor: {len(ok)} ok, {result['goodput_per_s']} ok/s, "
        f"{result['cpu_ms_per_request']} ms CPU per request"
    )
    return result


async def _health_cpu(stack: Stack, workers: int, seconds: float) -> float | None:
    """The proxy's CPU per ``GET /health`` at the same concurrency: a yardstick.

    It is what the proxy's server stack (hypercorn, quart-trio, trio) costs per request
    with no work behind it, so the chat request's CPU is also reported in units of this one,
    which moves much less from machine to machine (and with the neighbours' load) than
    milliseconds do.
    """
    server = stack.proxies["proxy"]
    host, _, port = server.url.removeprefix("http://").rpartition(":")
    request = encode_request("GET", host, int(port), "/health", [], b"")
    target = Target("proxy", "openai", host, int(port), False, request)
    run, used = await _metered_loop(
        target, {"proxy": server.pid}, workers=workers, seconds=seconds, warmup=min(0.5, seconds)
    )
    return _ms_per(used["proxy"], sum(1 for o in run.outcomes if o.kind == "ok"))


async def _metered_loop(
    target: Target, pids: dict[str, int], *, workers: int, seconds: float, warmup: float
) -> tuple[Run, dict[str, float | None]]:
    """A closed loop outside the phase machinery (no reconciliation), with the CPU of
    ``pids`` metered over the measured part only; the warm-up opens the connections."""
    pool = Pool(target.host, target.port)
    meter = CpuMeter(pids)
    try:
        await pool.prefill(workers)
        if warmup > 0:
            await closed_loop(pool, target, workers=workers, duration=warmup)
        meter.start()
        run = await closed_loop(pool, target, workers=workers, duration=seconds)
        used = meter.stop().seconds
    finally:
        await pool.aclose()
    return run, used


def _ms_per(cpu_seconds: float | None, count: int) -> float | None:
    return None if cpu_seconds is None or not count else round(cpu_seconds / count * 1000.0, 3)


# -- burst --------------------------------------------------------------------------------

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


def _windows_delta(phase: Phase) -> dict[str, Any]:
    before, after = phase.metrics_before, phase.metrics_after
    if before is None or after is None:
        return {}
    reasons = after["windows"]["by_reason"]
    delta = {k: int(v) - int(before["windows"]["by_reason"].get(k, 0)) for k, v in reasons.items()}
    flushed = sum(delta.values())
    return {"flushed": flushed, "by_reason": delta}


async def _burst(bench: Bench, scenario: ScenarioResult) -> None:
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
            "windows": _windows_delta(phase),
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


# -- overload -----------------------------------------------------------------------------


async def _overload(bench: Bench, scenario: ScenarioResult) -> None:
    service_s, inflight, queue = 0.100, 8, 8
    capacity = inflight / service_s
    steps = [0.5, 1.0, 2.0] if bench.options.quick else [0.5, 1.0, 1.5, 2.0, 3.0]
    gate = {"MAX_INFLIGHT": str(inflight), "MAX_QUEUE": str(queue), "ACQUIRE_TIMEOUT_S": "2"}
    sim_args = ["--ttft-ms", f"{service_s * 1000:g}", "--tokens-per-s", "0"]
    scenario.config = {
        "simulator": sim_args,
        "proxy": gate,
        "capacity_per_s": capacity,
        "steps": steps,
    }
    seconds = bench.options.step_s
    by_step: dict[float, PhaseResult] = {}
    async with running_stack(
        sim_args, {"gated": gate}, bench.options.log_dir / "overload"
    ) as stack:
        target = target_for("proxy", stack.proxies["gated"].url)
        pool = Pool(target.host, target.port)
        try:
            await bench.warmup(pool, target, inflight, min(bench.options.warmup_s, 1.0))
            for multiple in steps:
                rate = capacity * multiple

                async def drive(tally: Tally, rate: float = rate) -> Run:
                    return await open_loop(pool, target, rate=rate, duration=seconds, tally=tally)

                phase = await bench.measure(
                    scenario,
                    stack,
                    f"{multiple:g}x",
                    drive,
                    target=target,
                    proxy="gated",
                    label=f"{multiple:g}x capacity: open loop {rate:g}/s",
                    seconds=seconds,
                    bucket=0.5,
                )
                by_step[multiple] = phase.result
                scenario.checks.append(
                    Check(
                        f"{multiple:g}x: upstream in-flight never exceeds MAX_INFLIGHT",
                        phase.result.upstream.max_in_flight <= inflight,
                        f"<= {inflight}",
                        phase.result.upstream.max_in_flight,
                    )
                )
                scenario.checks.append(
                    Check(
                        f"{multiple:g}x: no request failed (admitted or shed only)",
                        phase.result.counts.error == 0,
                        0,
                        phase.result.counts.error,
                        str(phase.result.counts.errors_by_code),
                    )
                )
        finally:
            await pool.aclose()
    scenario.summary = {
        "capacity_per_s": capacity,
        "unloaded_p50_ms": by_step[min(steps)].latency_ms.p50,
        "steps": [
            {
                "multiple": m,
                "offered_per_s": r.rates.offered,
                "goodput_per_s": r.rates.goodput,
                "shed_per_s": r.rates.shed,
                "admitted_p50_ms": r.latency_ms.p50,
                "admitted_p99_ms": r.latency_ms.p99,
                "upstream_max_in_flight": r.upstream.max_in_flight,
            }
            for m, r in by_step.items()
        ],
    }
    top = by_step[max(steps)]
    # What one admitted request takes when nothing queues: the lowest step's p50 (it includes
    # the proxy's own time, which the nominal 100 ms does not). Admitted requests wait for at
    # most a full queue ahead of them: MAX_QUEUE / MAX_INFLIGHT more service times.
    unloaded = by_step[min(steps)].latency_ms.p50 or service_s * 1000
    bound_ms = round(unloaded * (1 + queue / inflight) + 50)
    shed_share = top.counts.shed / top.counts.offered if top.counts.offered else None
    scenario.targets += [
        target_result(
            f"goodput at {max(steps):g}x capacity plateaus near capacity",
            f">= 80% of {capacity:g}/s",
            top.rates.goodput / capacity * 100,
            "%",
            lambda v: v >= 80,
        ),
        target_result(
            f"share of arrivals shed at {max(steps):g}x capacity",
            f">= {(1 - 1 / max(steps)) * 0.7:.0%} (ideal {1 - 1 / max(steps):.0%})",
            None if shed_share is None else shed_share * 100,
            "%",
            lambda v: v >= (1 - 1 / max(steps)) * 70,
        ),
        target_result(
            f"p99 of admitted requests at {max(steps):g}x capacity",
            f"<= unloaded p50 x (1 + MAX_QUEUE/MAX_INFLIGHT) + 50 ms = {bound_ms:g} ms",
            top.latency_ms.p99,
            "ms",
            lambda v: v <= bound_ms,
        ),
    ]


# -- disconnect ---------------------------------------------------------------------------


def _abandoned_analysis(phase: Phase, ttft_s: float, rate: float, stream: bool) -> dict[str, Any]:
    """Tokens the upstream spent on calls whose client left, and how fast it learned.

    Tokens are estimated from the simulator's latency schedule (token ``i`` is generated at
    ``ttft + i / rate``): a call abandoned after ``e`` seconds generated
    ``min(n, floor((e - ttft) * rate) + 1)`` tokens, none before ``ttft``.
    """
    traces = [t for t in phase.sim_after["recent"] if t["outcome"] == "abandoned"]
    spent = full = 0
    for t in traces:
        n = int(t["output_tokens"] or 0)
        full += n
        elapsed = t["finished_at"] - t["started_at"]
        if elapsed >= ttft_s and n:
            spent += min(n, math.floor((elapsed - ttft_s) * rate) + 1)
    left = sorted(o.abort_at for o in phase.run.outcomes if o.abort_at is not None)
    ended = sorted(t["finished_at"] for t in traces)
    propagation: dict[str, float | None] = {"mean_ms": None, "max_ms_approx": None}
    after_left = None
    if left and len(left) == len(ended):
        gaps = [e - a for a, e in zip(left, ended, strict=True)]
        propagation = {
            "mean_ms": round(sum(gaps) / len(gaps) * 1000, 3),
            "max_ms_approx": round(max(gaps) * 1000, 3),
        }
        if stream:
            after_left = round(max(0.0, sum(gaps)) * rate, 1)
    return {
        "aborted": len(left),
        "upstream_abandoned": len(traces),
        "tokens_generated_for_abandoned_calls": spent,
        "tokens_if_run_to_completion": full,
        "tokens_generated_after_client_left": after_left,
        "abort_propagation": propagation,
    }


async def _disconnect(bench: Bench, scenario: ScenarioResult) -> None:
    clients = 20 if bench.options.quick else 60
    ttft_s, rate = 0.050, 100.0
    call_ttft_s, stream_tokens = 2.0, 300
    sim_args = ["--ttft-ms", f"{ttft_s * 1000:g}", "--tokens-per-s", f"{rate:g}"]
    scenario.config = {
        "simulator": sim_args,
        "proxy": {},
        "clients": clients,
        "mid_call": f"replies take {call_ttft_s:g} s; client i leaves after 0.1 + 0.4 i/n s",
        "mid_stream": f"{stream_tokens}-token streams; client i leaves after 3 + i mod 10 tokens",
    }
    arrivals = clients / 0.5  # every client starts within half a second

    def leave_mid_call(i: int) -> Abort:
        return Abort(after_s=0.1 + 0.4 * i / clients)

    def leave_mid_stream(i: int) -> Abort:
        return Abort(after_tokens=3 + i % 10)

    summary: dict[str, Any] = {}
    async with running_stack(
        sim_args, {"proxy": {}}, bench.options.log_dir / "disconnect"
    ) as stack:
        for kind, stream, text, abort_for, ttft in (
            ("mid-call", False, f"[[sim:ttft_ms={call_ttft_s * 1000:g}]] leave", leave_mid_call,
             call_ttft_s),
            ("mid-stream", True, f"[[sim:tokens={stream_tokens}]] leave", leave_mid_stream,
             ttft_s),
        ):  # fmt: skip
            for proxy in (None, "proxy"):
                url = stack.sim.url if proxy is None else stack.proxies[proxy].url
                target = target_for(
                    "simulator" if proxy is None else "proxy",
                    url,
                    stream=stream,
                    text=text,
                    max_tokens=stream_tokens + 100,
                )
                pool = Pool(target.host, target.port)
                name = f"{kind}-{'direct' if proxy is None else 'proxy'}"

                async def drive(
                    tally: Tally,
                    pool: Pool = pool,
                    target: Target = target,
                    abort_for: Callable[[int], Abort] = abort_for,
                ) -> Run:
                    return await open_loop(
                        pool, target, rate=arrivals, count=clients, abort_for=abort_for,
                        tally=tally,
                    )  # fmt: skip

                try:
                    await pool.prefill(clients)
                    phase = await bench.measure(
                        scenario,
                        stack,
                        name,
                        drive,
                        target=target,
                        proxy=proxy,
                        label=f"{name}: {clients} clients leave",
                        recent=clients,
                        bucket=0.25,
                    )
                finally:
                    await pool.aclose()
                analysis = _abandoned_analysis(phase, ttft, rate, stream)
                summary[name] = analysis
                scenario.checks += [
                    Check(
                        f"{name}: every client left before its answer",
                        phase.result.counts.aborted == clients,
                        clients,
                        phase.result.counts.aborted,
                    ),
                    Check(
                        f"{name}: the simulator saw every abort (abandoned count)",
                        analysis["upstream_abandoned"] == analysis["aborted"],
                        analysis["aborted"],
                        analysis["upstream_abandoned"],
                    ),
                    Check(
                        f"{name}: no abandoned call ran to completion upstream",
                        phase.result.upstream.completed == 0,
                        0,
                        phase.result.upstream.completed,
                    ),
                ]
    scenario.summary = summary
    for kind in ("mid-call", "mid-stream"):
        direct = summary[f"{kind}-direct"]["abort_propagation"]["mean_ms"]
        proxied = summary[f"{kind}-proxy"]["abort_propagation"]["mean_ms"]
        summary[f"{kind}-added_propagation_ms"] = _round(_delta(direct, proxied))


# -- helpers --------------------------------------------------------------------------------


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _p50(summary: Summary | None) -> float | None:
    return None if summary is None else summary.p50


def _p99(summary: Summary | None) -> float | None:
    return None if summary is None else summary.p99


def _timing(phase: PhaseResult, part: str) -> float | None:
    timing = phase.proxy_timing_ms or {}
    summary = timing.get(part)
    return None if summary is None else summary.p50


SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        Scenario(
            "overhead",
            "Proxy overhead: the same closed-loop load direct and through the proxy",
            "N clients send back-to-back non-streaming requests for the same duration, first "
            "straight to the simulator (answering in 50 ms), then through the proxy (batching "
            "and the gate off). Throughput ratio, added p50 and the proxy's CPU per request; "
            "then the same pair with 5 clients, a load nothing saturates.",
            _overhead,
        ),
        Scenario(
            "stream",
            "Streaming: TTFT and inter-token latency, direct and through the proxy",
            "N clients stream 24-token replies (first token at 50 ms, then 100 tokens/s), "
            "first straight from the simulator, then through the proxy: in OpenAI Chat "
            "(direct, proxy), then as the same Anthropic Messages request through the "
            "proxy's /v1/messages, which relays every event unchanged (anthropic-direct, "
            "anthropic-proxy). TTFT is measured from the send to the first content event; "
            "inter-token latency between content events; the relay's cost per SSE event "
            "is proxy minus direct. Then both pairs with 5 clients, a load nothing saturates.",
            run_stream,
        ),
        Scenario(
            "burst",
            "Burst: 200 clients inside 50 ms, admission windows on vs off",
            "200 requests arrive within 50 ms (the simulator answers in 100 ms). Through the "
            "batching proxy (windows of 16 / 10 ms, 16 upstream calls at once) the upstream "
            "sees a shaped wave; through the plain proxy, a spike. The simulator is polled "
            "every 5 ms and the proxy's /metrics every 10 ms; exact upstream call intervals "
            "come from the simulator's traces. Then one client alone measures what a window "
            "costs a lone request.",
            _burst,
        ),
        Scenario(
            "overload",
            "Overload: open-loop arrivals up to 2x capacity with the admission gate on",
            "The proxy admits 8 requests at once and queues 8 (MAX_INFLIGHT=8, MAX_QUEUE=8); "
            "the simulator answers in 100 ms, so capacity is 80 requests/s. Arrivals come at a "
            "fixed rate in steps of the capacity, latency measured from each intended send "
            "time. Goodput should plateau, the excess be shed with 429, admitted p99 bounded.",
            _overload,
        ),
        Scenario(
            "disconnect",
            "Disconnect: clients that leave mid-call and mid-stream",
            "Clients leave on purpose -- during a 2 s non-streaming call, or a few tokens into "
            "a 300-token stream -- directly at the simulator and through the proxy. The "
            "simulator must see every abort (its abandoned count), and the tokens spent on "
            "abandoned work stay what the client consumed, not what a full reply would cost.",
            _disconnect,
        ),
        Scenario(
            "ratelimit",
            "Rate limit: coordinated backoff on vs off against an enforced upstream limit",
            "The simulator enforces 50 requests per second (a token bucket of 50 refilling "
            "in 1 s; beyond it 429 with a whole-second retry-after) and answers in 50 ms. 10 "
            "closed-loop clients (--concurrency), able to send 200 requests/s, go through a "
            "proxy with coordinated backoff on, then through one with it off (each request "
            "honours only its own retry-after); both retry up to twice within the default "
            "retry budget. "
            "Reported per variant: goodput, client errors, p50/p99 of successes, the "
            "upstream's 429s, retry amplification (simulator requests per client request) "
            "and the proxy's retries and cooldowns.",
            run_ratelimit,
        ),
    )
}
