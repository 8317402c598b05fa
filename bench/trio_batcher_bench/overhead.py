"""The ``overhead`` scenario: the same closed-loop load direct and through the proxy.

N clients send back-to-back non-streaming requests, first straight to the simulator, then
through a proxy with batching and the gate off; then, under the same load, the floor server
(``bench.floor``: hypercorn and httpcore2 with none of the proxy's work) and the same proxy
as ``serve --workers 2`` (the workers dimension: what a second core buys); the same pair at
``LIGHT_CLIENTS``, and the proxy's CPU per ``GET /health`` as a yardstick. Reported: the
throughput ratio, the p50 the proxy adds, and its CPU per request.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from .cpu import CpuMeter
from .figures import delta as _delta
from .figures import ms_per as _ms_per
from .figures import ratio as _ratio
from .figures import round3 as _round
from .harness import LIGHT_CLIENTS, Bench, target_for, target_result
from .load import Run, Target, closed_loop
from .processes import Stack, running_stack
from .results import Check, PhaseResult, ScenarioResult
from .stats import summary_ms
from .wire import Pool, encode_request

__all__ = [
    "ADDED_P50_MAX_MS",
    "PROXY_CPU_MAX_MS",
    "THROUGHPUT_RATIO_MIN",
    "metered_loop",
    "run_overhead",
]

# Performance targets (issue 6).
THROUGHPUT_RATIO_MIN: Final = 0.90
ADDED_P50_MAX_MS: Final = 5.0
PROXY_CPU_MAX_MS: Final = 1.0
WORKERS: Final = 2  # the workers dimension: the same load through serve --workers 2
WORKERS_THROUGHPUT_MIN: Final = 0.90  # the performance issue's target for 2 workers


async def run_overhead(bench: Bench, scenario: ScenarioResult) -> None:
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
        sim_args,
        {"proxy": {}, "workers": {}},
        opts.log_dir / "overhead",
        floor=True,
        workers={"workers": WORKERS},
    ) as stack:
        pair = await bench.measure_pair(scenario, stack, workers=workers, stream=False)
        direct, proxy = pair[0].result, pair[1].result
        floor = await _floor(bench, stack, workers)
        many = await _workers(bench, stack, workers)
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
    if many is not None:
        many_ratio = _ratio(direct.rates.goodput, many["goodput_per_s"] or 0.0)
        many["throughput_ratio"] = None if many_ratio is None else round(many_ratio, 4)
        many["added_p50_ms"] = _round(_delta(direct.latency_ms.p50, many["p50_ms"]))
        scenario.checks.append(
            Check(
                f"{WORKERS} workers: every request answered 200",
                many["failed"] == 0,
                0,
                many["failed"],
            )
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
        "workers": many,
        "cpu_per_request_in_health_requests": (
            None if cpu is None or not yardstick else round(cpu / yardstick, 2)
        ),
    }
    scenario.targets += [
        target_result(
            f"throughput through {WORKERS} workers vs direct at {workers} clients",
            f">= {WORKERS_THROUGHPUT_MIN:.0%}",
            None
            if many is None or many["throughput_ratio"] is None
            else many["throughput_ratio"] * 100,
            "%",
            lambda v: v >= WORKERS_THROUGHPUT_MIN * 100,
        ),
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
    target = target_for("simulator", stack.floor.url)  # the same request as the direct phase
    return await _side_phase(bench, stack, "floor", target, stack.floor.pid, workers)


async def _workers(bench: Bench, stack: Stack, workers: int) -> dict[str, Any] | None:
    """The proxy's load through ``serve --workers WORKERS``: the supervisor and its workers
    metered together. Outside the phase machinery: each worker keeps its own ``/metrics``."""
    server = stack.proxies.get("workers")
    if server is None:
        return None
    target = target_for("proxy", server.url)
    result = await _side_phase(bench, stack, f"{WORKERS} workers", target, server.pid, workers)
    return {"count": WORKERS, **result}


async def _side_phase(
    bench: Bench, stack: Stack, name: str, target: Target, pid: int, workers: int
) -> dict[str, Any]:
    opts = bench.options
    bench.display.line(f"  {name}: {workers} clients, closed loop, ~{opts.phase_s:g} s ...")
    run, used = await metered_loop(
        target,
        {"server": pid, "simulator": stack.sim.pid},
        workers=workers,
        seconds=opts.phase_s,
        warmup=opts.warmup_s,
        trees=("server",),
    )
    ok = [o for o in run.outcomes if o.kind == "ok"]
    result = {
        "requests": len(ok),
        "failed": len(run.outcomes) - len(ok),
        "goodput_per_s": round(len(ok) / run.wall, 1) if run.wall > 0 else None,
        "p50_ms": summary_ms(o.latency for o in ok).p50,
        "cpu_ms_per_request": _ms_per(used["server"], len(ok)),
        "simulator_cpu_ms_per_request": _ms_per(used["simulator"], len(ok)),
    }
    bench.display.line(
        f"  {name}: {len(ok)} ok, {result['goodput_per_s']} ok/s, "
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
    run, used = await metered_loop(
        target, {"proxy": server.pid}, workers=workers, seconds=seconds, warmup=min(0.5, seconds)
    )
    return _ms_per(used["proxy"], sum(1 for o in run.outcomes if o.kind == "ok"))


async def metered_loop(
    target: Target,
    pids: dict[str, int],
    *,
    workers: int,
    seconds: float,
    warmup: float,
    trees: Collection[str] = (),
) -> tuple[Run, dict[str, float | None]]:
    """A closed loop outside the phase machinery (no reconciliation: a peer gateway or a
    proxy of several workers has no one ``/metrics`` to reconcile with), with the CPU of
    ``pids`` (and of the descendants of those named in ``trees``) metered over the measured
    part only; the warm-up opens the connections."""
    pool = Pool(target.host, target.port)
    meter = CpuMeter(pids, trees=trees)
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


def _timing(phase: PhaseResult, part: str) -> float | None:
    timing = phase.proxy_timing_ms or {}
    summary = timing.get(part)
    return None if summary is None else summary.p50
