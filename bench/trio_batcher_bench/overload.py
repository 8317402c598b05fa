"""The ``overload`` scenario: open-loop arrivals above capacity with the admission gate on.

The proxy admits 8 requests at once and queues 8 (``MAX_INFLIGHT=8``, ``MAX_QUEUE=8``);
the simulator answers in 100 ms, so capacity is 80 requests/s. Arrivals come at a fixed
rate in steps of the capacity, latency measured from each intended send time: goodput
should plateau, the excess be shed with 429 at once, and admitted p99 stay bounded.
"""

from __future__ import annotations

from .harness import Bench, target_for, target_result
from .load import Run, Tally, open_loop
from .processes import running_stack
from .results import Check, PhaseResult, ScenarioResult
from .wire import Pool

__all__ = ["run_overload"]


async def run_overload(bench: Bench, scenario: ScenarioResult) -> None:
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
