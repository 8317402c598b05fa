"""The ``tenants`` scenario: one tenant floods, another trickles, then weights 3:1 share slots.

Theory of operation
-------------------
One simulator answers in ``REPLY_MS`` (± ``JITTER``, so the gate's slots free one at a time
rather than in lockstep). Two proxies stand in front of it with the same admission gate
(``MAX_INFLIGHT=8``: capacity 80 requests/s; ``MAX_QUEUE=160``; ``ACQUIRE_TIMEOUT_S`` above
the longest wait the queue allows, so every shed is the full queue's) and each its own
``TENANTS_FILE`` holding two tenants, ``team-a`` and ``team-b`` (keys as SHA-256 digests,
``tenants.hash_key``; the files are written next to the scenario's logs): ``equal`` gives
both weight 1, ``weighted`` gives ``team-a`` weight 3. Three measured phases:

1. ``b-alone`` (``equal``): B sends ``QUIET_REQUESTS`` at ``QUIET_RATE`` per second, an open
   loop, nobody else: B's unloaded latency.
2. ``flood`` (``equal``): A sends its requests inside ``FLOOD_SPREAD_S``; ``QUIET_AFTER_S``
   later B sends the same trickle as in phase 1. A fills the slots and the queue and the
   rest of it is shed at the door (``queue_full``); B, arriving while A's queue still holds
   over a hundred waiters, is admitted at one of the next free slots (the fair order
   alternates equal weights, and a tenant with nobody waiting comes in at the current
   virtual time), and would push out A's newest waiter if it found the queue full. What is
   compared: B's p50 against phase 1's, who was shed, and with what. A check makes sure the
   gate was still saturated when B's last request finished (A still had successes to come).

   Why B waits ``QUIET_AFTER_S`` (0.6 s): taking in 300 requests that arrive inside 20 ms
   and answering the 130 it sheds costs the proxy's one event loop a few hundred ms of CPU
   on a 2-core machine (measured: A's last door-shed answered 0.35 to 0.6 s after the
   flood began). Every request, whatever its tenant, waits for the loop meanwhile: no
   admission order can help, and B's latency then measures the machine. From 0.6 s on, A
   still holds about a hundred waiters, so B meets a saturated gate and what it measures
   is the fair order. The summary says when A's last door-shed was answered.
3. ``weighted`` (``weighted``): ``BACKLOG_CLIENTS`` closed-loop clients per tenant, so both
   keep a queue (the gate is saturated throughout, nothing is shed), for the phase's
   length. A completion under saturation is a slot handed on, so the successful requests
   each tenant finished between ``SKIP_S`` after the start and the moment the clients stop
   sending are the admissions the fair order gave it; their ratio is compared with 3:1.

Each phase goes through ``Bench.measure`` (the clients reconciled with the proxy's
``/metrics``, which the proxies answer with ``METRICS_TOKEN``, since a tenants file with keys
makes every endpoint want one); the flood is also reconciled per tenant with ``by_tenant``.
The arithmetic is in ``tenant_stats``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from trio_batcher.tenants import hash_key

from .harness import MODEL, Bench, Phase
from .load import Outcome, Run, Tally, Target, closed_loop, open_loop
from .processes import Stack, running_stack
from .results import Check, ScenarioResult
from .tenant_stats import (
    admitted_between,
    cumulative_admissions,
    request_rows,
    tenant_summary,
    tenants_targets,
    weighted_share,
)
from .wire import Pool

__all__ = ["KEYS", "run_tenants", "tenants_toml"]

REPLY_MS: Final = 100
JITTER: Final = 0.2
SLOTS: Final = 8
QUEUE: Final = 160
ACQUIRE_TIMEOUT_S: Final = 10.0  # above QUEUE / capacity + the quiet share: never reached
FLOOD_SPREAD_S: Final = 0.02
QUIET_AFTER_S: Final = 0.6
QUIET_RATE: Final = 20.0
BACKLOG_CLIENTS: Final = 16  # per tenant: 32 clients for 8 slots keep both queues non-empty
HEAVY_WEIGHT: Final = 3
METRICS_TOKEN: Final = "bench-tenants-metrics-token"
A, B = "team-a", "team-b"
KEYS: Final[Mapping[str, str]] = {
    A: "tb-bench-tenant-team-a-floods-0001",
    B: "tb-bench-tenant-team-b-quiet-0002",
}
_TEXT: Final = "Benchmark request: reply with a few words."


def tenants_toml(weights: Mapping[str, float]) -> str:
    """A ``TENANTS_FILE`` with one tenant per ``KEYS`` entry, of the given weight."""
    lines = ["# trio-batcher bench: the tenants scenario's tenants (keys as digests only)."]
    for name, key in KEYS.items():
        lines += ["", "[[tenant]]", f'name = "{name}"', f'key_sha256 = ["{hash_key(key)}"]']
        lines.append(f"weight = {weights.get(name, 1):g}")
    return "\n".join(lines) + "\n"


def _target(url: str, tenant: str) -> Target:
    body: dict[str, object] = {
        "model": MODEL,
        "max_completion_tokens": 64,
        "messages": [{"role": "user", "content": _TEXT}],
    }
    headers = [("content-type", "application/json"), ("authorization", f"Bearer {KEYS[tenant]}")]
    return Target.build("proxy", url, "/v1/chat/completions", headers, body)


def _combined(runs: Sequence[Run], *, mode: str, concurrency: int | None = None) -> Run:
    """Concurrent runs (one per tenant) as the one run their phase measured."""
    outcomes = [o for run in runs for o in run.outcomes]
    started = min(run.started for run in runs)
    finished = max(run.finished for run in runs)
    offered = sum(run.offered for run in runs)
    if mode == "closed":
        return Run(outcomes, started, finished, offered, mode="closed", concurrency=concurrency)
    # An open phase's rate: its arrivals over the span of their schedule.
    intended = [o.intended for o in outcomes] or [started]
    span = max(intended) - min(intended)
    rate = round(offered / span, 2) if span > 0 else float(offered)
    unsent = sum(run.unsent_late for run in runs), sum(run.unsent_bound for run in runs)
    return Run(outcomes, started, finished, offered, *unsent, mode="open", rate=rate)


def _shed_delta(phase: Phase, tenant: str) -> int | None:
    before, after = phase.metrics_before, phase.metrics_after
    if before is None or after is None:
        return None

    def total(snapshot: Mapping[str, Any]) -> int:
        entry = snapshot.get("by_tenant", {}).get(tenant)
        return 0 if entry is None else int(entry["shed"]["total"])

    return total(after) - total(before)


async def _quiet_alone(
    bench: Bench, scenario: ScenarioResult, stack: Stack, requests: int
) -> list[Outcome]:
    server = stack.proxies["equal"]
    target = _target(server.url, B)
    pool = Pool(target.host, target.port)
    try:
        await bench.warmup(pool, target, 2, min(bench.options.warmup_s, 0.5))

        async def drive(tally: Tally) -> Run:
            return await open_loop(
                pool, target, rate=QUIET_RATE, count=requests, max_in_flight=requests,
                max_lag=10.0, tally=tally,
            )  # fmt: skip

        phase = await bench.measure(
            scenario,
            stack,
            "b-alone",
            drive,
            target=target,
            proxy="equal",
            label=f"b-alone: {B} sends {requests} at {QUIET_RATE:g}/s",
            seconds=requests / QUIET_RATE,
        )
    finally:
        await pool.aclose()
    return phase.run.outcomes


async def _flood(
    bench: Bench, scenario: ScenarioResult, stack: Stack, flood: int, quiet: int
) -> tuple[dict[str, list[Outcome]], Phase]:
    server = stack.proxies["equal"]
    targets = {A: _target(server.url, A), B: _target(server.url, B)}
    pools = {t: Pool(target.host, target.port) for t, target in targets.items()}
    runs: dict[str, Run] = {}
    try:
        await bench.warmup(pools[A], targets[A], 8, min(bench.options.warmup_s, 0.5))
        await pools[A].prefill(flood)
        await pools[B].prefill(quiet)

        async def drive(tally: Tally) -> Run:
            zero = trio.current_time() + 0.02

            async def one(tenant: str, count: int, rate: float, start: float) -> None:
                runs[tenant] = await open_loop(
                    pools[tenant], targets[tenant], rate=rate, count=count,
                    max_in_flight=count, max_lag=10.0, tally=tally, start_at=start,
                )  # fmt: skip

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, A, flood, flood / FLOOD_SPREAD_S, zero)
                nursery.start_soon(one, B, quiet, QUIET_RATE, zero + QUIET_AFTER_S)
            return _combined([runs[A], runs[B]], mode="open")

        phase = await bench.measure(
            scenario,
            stack,
            "flood",
            drive,
            target=targets[A],
            proxy="equal",
            label=f"flood: {A} sends {flood} at once, {B} {quiet} at {QUIET_RATE:g}/s",
            seconds=QUIET_AFTER_S + quiet / QUIET_RATE,
        )
    finally:
        for pool in pools.values():
            await pool.aclose()
    return {t: run.outcomes for t, run in runs.items()}, phase


async def _weighted(
    bench: Bench, scenario: ScenarioResult, stack: Stack, seconds: float
) -> tuple[dict[str, list[Outcome]], float, Phase]:
    server = stack.proxies["weighted"]
    targets = {A: _target(server.url, A), B: _target(server.url, B)}
    pools = {t: Pool(target.host, target.port) for t, target in targets.items()}
    runs: dict[str, Run] = {}
    zero: list[float] = []
    try:
        for tenant, target in targets.items():
            await bench.warmup(pools[tenant], target, BACKLOG_CLIENTS, 0)

        async def drive(tally: Tally) -> Run:
            zero.append(trio.current_time())

            async def one(tenant: str) -> None:
                runs[tenant] = await closed_loop(
                    pools[tenant], targets[tenant], workers=BACKLOG_CLIENTS, duration=seconds,
                    tally=tally,
                )  # fmt: skip

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, A)
                nursery.start_soon(one, B)
            return _combined([runs[A], runs[B]], mode="closed", concurrency=2 * BACKLOG_CLIENTS)

        phase = await bench.measure(
            scenario,
            stack,
            "weighted",
            drive,
            target=targets[A],
            proxy="weighted",
            label=f"weighted {HEAVY_WEIGHT}:1: {BACKLOG_CLIENTS} clients per tenant",
            seconds=seconds,
        )
    finally:
        for pool in pools.values():
            await pool.aclose()
    return {t: run.outcomes for t, run in runs.items()}, zero[0], phase


def _latency_table(alone: dict[str, Any], flood: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    rows = [
        [f"{B} alone", alone["requests"], alone["latency_p50_ms"], alone["latency_p99_ms"]],
        *(
            [f"{t} during the flood", s["requests"], s["latency_p50_ms"], s["latency_p99_ms"]]
            for t, s in ((B, flood[B]), (A, flood[A]))
        ),
    ]
    return {"columns": ["series", "requests", "p50_ms", "p99_ms"], "rows": rows}


async def run_tenants(bench: Bench, scenario: ScenarioResult) -> None:
    opts = bench.options
    flood = 200 if opts.quick else 300
    quiet = 10 if opts.quick else 20
    seconds = opts.step_s
    skip = 0.5 if opts.quick else 1.0
    sim_args = ["--ttft-ms", str(REPLY_MS), "--tokens-per-s", "0"]
    sim_args += ["--jitter", f"{JITTER:g}", "--seed", "17"]
    files = opts.log_dir / "tenants"
    await trio.Path(files).mkdir(parents=True, exist_ok=True)
    weights = {"equal": {A: 1.0, B: 1.0}, "weighted": {A: float(HEAVY_WEIGHT), B: 1.0}}
    gate = {
        "MAX_INFLIGHT": str(SLOTS),
        "MAX_QUEUE": str(QUEUE),
        "ACQUIRE_TIMEOUT_S": f"{ACQUIRE_TIMEOUT_S:g}",
        "METRICS_TOKEN": METRICS_TOKEN,
    }
    proxies: dict[str, dict[str, str]] = {}
    for name, tenant_weights in weights.items():
        path = Path(files) / f"{name}.toml"
        await trio.Path(path).write_text(tenants_toml(tenant_weights))
        proxies[name] = {**gate, "TENANTS_FILE": str(path)}
    scenario.config = {
        "simulator": sim_args,
        "proxies": {
            n: {k: v for k, v in p.items() if k != "METRICS_TOKEN"} for n, p in proxies.items()
        },
        "weights": weights,
        "flood_requests": flood,
        "quiet_requests": quiet,
        "quiet_rate_per_s": QUIET_RATE,
        "quiet_after_ms": QUIET_AFTER_S * 1000,
        "backlog_clients_per_tenant": BACKLOG_CLIENTS,
    }
    async with running_stack(sim_args, proxies, opts.log_dir / "tenants") as stack:
        alone = await _quiet_alone(bench, scenario, stack, quiet)
        flooded, flood_phase = await _flood(bench, scenario, stack, flood, quiet)
        backlog, zero, _ = await _weighted(bench, scenario, stack, seconds)

    quiet_alone = tenant_summary(alone)
    during = {t: tenant_summary(flooded[t]) for t in (A, B)}
    for tenant in (A, B):
        proxy_shed = _shed_delta(flood_phase, tenant)
        scenario.checks.append(
            Check(
                f"flood: {tenant}'s shed requests, clients vs the proxy's by_tenant",
                proxy_shed == during[tenant]["shed"],
                during[tenant]["shed"],
                proxy_shed,
                "shed as the clients saw them (expected) vs by_tenant shed.total delta (actual)",
            )
        )
    first = min(o.intended for outcomes in flooded.values() for o in outcomes)

    def after_first(times: list[float]) -> float | None:
        return None if not times else round((max(times) - first) * 1000.0, 3)

    taken_in = after_first([o.done for o in flooded[A] if o.kind == "shed"])
    quiet_done = after_first([o.done for o in flooded[B]])
    flood_done = after_first([o.done for o in flooded[A] if o.kind == "ok"])
    scenario.checks.append(
        Check(
            f"flood: the gate was still saturated when {B}'s last request finished",
            quiet_done is not None and flood_done is not None and flood_done > quiet_done,
            f"{A}'s last success after {B}'s last answer ({quiet_done} ms)",
            flood_done,
            f"ms after the flood's first send: {A}'s last success (actual) must come after "
            f"{B}'s last answer, or {B} did not meet a full gate throughout",
        )
    )
    admitted = admitted_between(backlog, zero + skip, zero + seconds)
    share = weighted_share(admitted, A, B)
    slowdown = None
    if quiet_alone["latency_p50_ms"] and during[B]["latency_p50_ms"] is not None:
        slowdown = round(during[B]["latency_p50_ms"] / quiet_alone["latency_p50_ms"], 3)
    scenario.summary = {
        "flooding_tenant": A,
        "quiet_tenant": B,
        "slots": SLOTS,
        "queue": QUEUE,
        "reply_ms": REPLY_MS,
        "capacity_per_s": SLOTS * 1000 / REPLY_MS,
        "quiet_alone": quiet_alone,
        "flood": during,
        "quiet_p50_ratio": slowdown,
        "flood_timeline_ms": {
            "quiet_starts": QUIET_AFTER_S * 1000,
            "last_door_shed_answered": taken_in,
            "quiet_last_answered": quiet_done,
            "flood_last_success": flood_done,
        },
        "latency": _latency_table(quiet_alone, during),
        "weighted": {
            "weights": weights["weighted"],
            "clients_per_tenant": BACKLOG_CLIENTS,
            "window_ms": [skip * 1000, seconds * 1000],
            "admitted": admitted,
            "ratio": share["ratio"],
            "share": share["share"],
            "statuses": {t: tenant_summary(backlog[t])["statuses"] for t in (A, B)},
        },
    }
    scenario.traces["flood"] = {
        **request_rows(flooded, first),
        "time_zero": "the flood's first intended send",
    }
    scenario.traces["admissions"] = {
        **cumulative_admissions(backlog, zero),
        "window_ms": [skip * 1000, seconds * 1000],
        "time_zero": "the weighted phase's start; each row: successful requests so far",
    }
    scenario.targets += tenants_targets(
        quiet_unloaded_p50_ms=quiet_alone["latency_p50_ms"],
        quiet_loaded_p50_ms=during[B]["latency_p50_ms"],
        quiet_shed=during[B]["shed"],
        flood_shed=during[A]["shed"],
        ratio=share["ratio"],
        weights=(float(HEAVY_WEIGHT), 1.0),
    )
