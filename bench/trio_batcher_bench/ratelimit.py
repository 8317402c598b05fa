"""The ``ratelimit`` scenario: coordinated backoff on vs off against an enforced rate limit.

Theory of operation
-------------------
One simulator enforces a request limit (a token bucket of ``LIMIT_REQUESTS`` refilling
in ``LIMIT_PERIOD_S``: Anthropic's per-minute bucket with the minute shortened, so a
phase sees several refills). Two proxies stand in front of it, identical but for
``UPSTREAM_COORDINATED_BACKOFF``; both retry (``UPSTREAM_MAX_RETRIES=2``, the default
retry budget). The same closed loop runs through each in turn: ``clients`` workers, each
sending its next request as soon as the last one was answered, with an unthrottled
capacity far above the limit.

A closed loop is the load that shows what coordination is for: a client that gets a fast
429 comes straight back. Without coordination every one of those comes back into an
empty bucket (each request only honours its own ``retry-after``); with it, the first 429
(or a success saying ``remaining: 0``) holds every new upstream call until the bucket has
room, so clients wait instead of failing. Calls already on their way when the bucket runs
dry still get 429s -- the proxy learns it is empty from those answers -- so even with
coordination every refill cycle costs a few, retried after the cooldown; how many grows
with the calls in flight, hence the default of 10 clients. An open loop above the limit
would not show the difference: its excess arrivals reach the upstream whatever the proxy
does (both measured in docs/benchmarks.md).

Each phase resets the simulator (its bucket is full at the start), and the simulator's
``by_status`` counters are polled every ``_POLL_S`` during the phase, so the report has
the upstream's 200s and 429s over time. The phase reconciles the clients with the
proxy's ``/metrics`` like every other, and the simulator with the proxy's upstream
attempts (``Bench.measure(retries=True)``). Then two checks compare the variants: with
coordination, retry amplification (simulator requests per client request) stays at most
``AMPLIFICATION_MAX``, and the upstream answers fewer 429s than without.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

import trio

from .harness import Bench, Phase, monotonic_offset, target_for
from .load import closed_driver
from .processes import Stack, running_stack
from .results import Check, ScenarioResult
from .stats import resilience_delta
from .wire import Pool, encode_request, get_json

__all__ = ["AMPLIFICATION_MAX", "run_ratelimit", "side_by_side", "variant_summary"]

LIMIT_REQUESTS: Final = 50
LIMIT_PERIOD_S: Final = 1.0
CLIENTS: Final = 10
REPLY_MS: Final = 50
AMPLIFICATION_MAX: Final = 1.1
_POLL_S: Final = 0.1
_BUCKET_S: Final = 0.5

VARIANTS: Final[Mapping[str, Mapping[str, str]]] = {
    "on": {"UPSTREAM_COORDINATED_BACKOFF": "1", "UPSTREAM_MAX_RETRIES": "2"},
    "off": {"UPSTREAM_COORDINATED_BACKOFF": "0", "UPSTREAM_MAX_RETRIES": "2"},
}


def _phase_name(variant: str) -> str:
    return f"backoff-{variant}"


def _ratio(numerator: int | None, denominator: int) -> float | None:
    return None if numerator is None or denominator <= 0 else round(numerator / denominator, 4)


def variant_summary(phase: Phase) -> dict[str, Any]:
    """What one variant did, from the clients, the simulator and the proxy's ``/metrics``.

    ``amplification`` is simulator requests per client request; ``amplification_metrics``
    the same from the proxy's own ``upstream.attempts`` (``None`` when ``/metrics`` has no
    ``upstream`` block, like every counter taken from it).
    """
    result = phase.result
    sent = result.counts.sent
    by_status = {str(k): int(v) for k, v in phase.sim_after["by_status"].items()}
    errors = Counter(str(o.status) for o in phase.run.outcomes if o.kind in ("error", "shed"))
    counters: dict[str, int] | None = None
    if phase.metrics_before is not None and phase.metrics_after is not None:
        counters = resilience_delta(phase.metrics_before, phase.metrics_after)

    def counter(key: str) -> int | None:
        return None if counters is None else counters.get(key, 0)

    attempts = counter("attempts")
    return {
        "client_requests": sent,
        "client_ok": result.counts.ok,
        "goodput_per_s": result.rates.goodput,
        "client_errors_by_status": dict(sorted(errors.items())),
        "client_errors_by_code": result.counts.errors_by_code,
        "latency_p50_ms": result.latency_ms.p50,
        "latency_p99_ms": result.latency_ms.p99,
        "upstream_requests": result.upstream.requests,
        "upstream_by_status": by_status,
        "upstream_429": by_status.get("429", 0),
        "amplification": _ratio(result.upstream.requests, sent),
        "upstream_attempts": attempts,
        "amplification_metrics": _ratio(attempts, sent),
        "retries": counter("retries"),
        "retries_denied_by_budget": counter("retries_denied_by_budget"),
        "cooldowns_opened": counter("cooldowns_opened"),
        "ratelimit_holds": counter("ratelimit_holds"),
        "shed_by_cooldown": counter("shed_by_cooldown"),
    }


_TABLE_ROWS: Final = (
    ("client requests", "client_requests"),
    ("client goodput/s", "goodput_per_s"),
    ("client errors by status", "client_errors_by_status"),
    ("p50 of successes (ms)", "latency_p50_ms"),
    ("p99 of successes (ms)", "latency_p99_ms"),
    ("upstream requests (simulator)", "upstream_requests"),
    ("upstream 429s (simulator)", "upstream_429"),
    ("retry amplification (simulator / client)", "amplification"),
    ("upstream attempts (/metrics)", "upstream_attempts"),
    ("retry amplification (/metrics)", "amplification_metrics"),
    ("retries", "retries"),
    ("retries denied by budget", "retries_denied_by_budget"),
    ("cooldowns opened", "cooldowns_opened"),
    ("rate-limit holds", "ratelimit_holds"),
)


def side_by_side(on: Mapping[str, Any], off: Mapping[str, Any]) -> dict[str, Any]:
    """The two variants as one table (``{"columns", "rows"}``, as the report renders it)."""
    return {
        "columns": ["", "coordinated backoff ON", "OFF"],
        "rows": [[label, on[key], off[key]] for label, key in _TABLE_ROWS],
    }


def _status_table(polls: list[tuple[float, Mapping[str, Any]]], t0: float) -> dict[str, Any]:
    rows = [
        [
            round((t - t0) * 1000.0, 1),
            int(stats["by_status"].get("200", 0)),
            int(stats["by_status"].get("429", 0)),
            int(stats["requests_total"]),
        ]
        for t, stats in polls
    ]
    return {"columns": ["t_ms", "ok_total", "r429_total", "requests_total"], "rows": rows}


async def _variant(
    bench: Bench, scenario: ScenarioResult, stack: Stack, variant: str, clients: int
) -> tuple[Phase, dict[str, Any]]:
    """One closed-loop phase through the ``variant`` proxy, the simulator polled meanwhile."""
    seconds = bench.options.phase_s
    target = target_for("proxy", stack.proxies[variant].url)
    pool = Pool(target.host, target.port)
    sim_host, _, sim_port = stack.sim.url.removeprefix("http://").rpartition(":")
    sim_poll = Pool(sim_host, int(sim_port))
    poll_request = encode_request("GET", sim_host, int(sim_port), "/_sim/stats?recent=0", [], b"")
    polls: list[tuple[float, Mapping[str, Any]]] = []

    async def poll() -> None:
        while True:
            stats: Any = await get_json(sim_poll, poll_request)
            polls.append((time.monotonic(), stats))
            await trio.sleep(_POLL_S)

    name = _phase_name(variant)
    try:
        # Connections only: warm-up traffic would spend the bucket and earn retry budget.
        await bench.warmup(pool, target, clients, 0)
        await sim_poll.prefill(1)
        phase = await bench.measure(
            scenario,
            stack,
            name,
            closed_driver(pool, target, clients, seconds),
            target=target,
            proxy=variant,
            label=f"{name}: {clients} clients, closed loop, limit {LIMIT_REQUESTS} per "
            f"{LIMIT_PERIOD_S:g} s",
            seconds=seconds,
            bucket=_BUCKET_S,
            concurrent=poll,
            retries=True,
        )
    finally:
        await pool.aclose()
        await sim_poll.aclose()
    t0 = phase.run.started + monotonic_offset()
    trace = {
        "proxy": variant,
        "settings": dict(stack.proxies[variant].env),
        "time_zero": "the phase's first send; t_ms is ms after it",
        "upstream_status_polls": _status_table(polls, t0),
    }
    return phase, trace


async def run_ratelimit(bench: Bench, scenario: ScenarioResult) -> None:
    """The scenario: both variants against one rate-limited simulator, then the checks."""
    clients = bench.options.concurrency or CLIENTS
    sim_args = [
        "--ttft-ms", str(REPLY_MS), "--tokens-per-s", "0",
        "--rpm-limit", str(LIMIT_REQUESTS), "--ratelimit-period-s", f"{LIMIT_PERIOD_S:g}",
    ]  # fmt: skip
    proxies = {name: dict(settings) for name, settings in VARIANTS.items()}
    scenario.config = {
        "simulator": sim_args,
        "proxies": proxies,
        "clients": clients,
        "limit": {
            "requests": LIMIT_REQUESTS,
            "period_s": LIMIT_PERIOD_S,
            "per_s": LIMIT_REQUESTS / LIMIT_PERIOD_S,
        },
        "unthrottled_capacity_per_s": clients * 1000 / REPLY_MS,
    }
    summaries: dict[str, dict[str, Any]] = {}
    async with running_stack(sim_args, proxies, bench.options.log_dir / "ratelimit") as stack:
        for variant in VARIANTS:
            phase, trace = await _variant(bench, scenario, stack, variant, clients)
            summaries[variant] = variant_summary(phase)
            scenario.traces[variant] = trace
    on, off = summaries["on"], summaries["off"]
    scenario.summary = {
        "clients": clients,
        "limit_per_s": LIMIT_REQUESTS / LIMIT_PERIOD_S,
        "on": on,
        "off": off,
        "side_by_side": side_by_side(on, off),
    }
    scenario.checks += [
        Check(
            f"{_phase_name('on')}: retry amplification with coordinated backoff",
            on["amplification"] is not None and on["amplification"] <= AMPLIFICATION_MAX,
            f"<= {AMPLIFICATION_MAX:g}",
            on["amplification"],
            "simulator requests per client request",
        ),
        Check(
            "coordinated backoff: fewer upstream 429s than without it",
            on["upstream_429"] < off["upstream_429"],
            f"< {off['upstream_429']} (OFF)",
            on["upstream_429"],
            "the simulator's 429 answers during each phase",
        ),
    ]
    if on["upstream_attempts"] is None:
        scenario.notes.append(
            "The proxy's /metrics has no `upstream` block: attempts, retries and cooldowns "
            "are not reported, and the simulator is reconciled with the proxy only as "
            "'at least one call per request'."
        )
