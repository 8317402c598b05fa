"""The ``mixed`` scenario: interactive clients while deferrable work queues, lanes on vs off.

Theory of operation
-------------------
Issue 31's priority lanes admit interactive requests ahead of deferrable ones (background
responses, flex requests falling back to realtime) when the admission gate is full, and give
the deferrable lane a bounded share so it still completes. This scenario measures what that
buys a person waiting for an answer while background work floods the gateway, and what the
flex part of that work saves.

One simulator answers in ``REPLY_MS`` (± ``JITTER``, so slots free one at a time), and two
proxy processes stand in front of it with the same gate (``MAX_INFLIGHT`` slots: capacity
``MAX_INFLIGHT / REPLY_MS`` requests a second; a ``MAX_QUEUE`` and ``ACQUIRE_TIMEOUT_S``
large enough that nothing is shed), identical but for ``LANES_ENABLED``. Three phases:

1. ``alone`` (lanes on): ``INTERACTIVE_CLIENTS`` closed-loop clients of OpenAI Chat, nobody
   else: their unloaded p50 and p99 (through ``Bench.measure``, reconciled with ``/metrics``).
2. ``mixed-lanes-on`` and 3. ``mixed-lanes-off``: the same interactive clients for the same
   time, and meanwhile the deferrable load, two open loops:

   - *background*: Responses API requests with ``background: true`` (and ``store: true``,
     which background needs) at ``BACKGROUND_RATE`` a second -- above the capacity the
     interactive clients leave, so the deferrable queue grows through the phase. Each POST is
     answered at once (``queued``); the work then queues in the gateway as deferrable. After
     the phase every accepted response is polled (``GET /v1/responses/{id}``) until it is
     finished, for at most ``DRAIN_S``: none may be left behind (no starvation).
   - *flex*: Chat requests with ``service_tier: "flex"`` at ``FLEX_RATE`` a second, which the
     gateway answers through Message Batches at the batch price (or, past its wait, falls
     back to realtime as deferrable work).

   What is compared: the interactive clients' p50 and p99 with lanes on, with lanes off, and
   alone. With lanes off the gate is one FIFO, so an interactive request waits behind the
   whole deferrable queue; with lanes on it waits for the next free slot. The ``lanes`` block
   of ``/metrics`` (admitted per lane, queue wait p95 per lane) is read before and after each
   phase; the ``flex`` block (cost at the batch price and what it saved against realtime),
   when the gateway has one, the same way.

Whatever the gateway does with the deferrable requests is reported, not assumed: a gateway
without background responses answers them 400 (counted by status), one without flex
treats ``service_tier`` as an ignored parameter and answers them in realtime. When no
deferrable request reached the gate (no background accepted, nothing in the ``deferrable``
lane) the lanes have nothing to act on: the scenario says so in a note instead of checking
a difference it cannot measure.

The mixed phases are measured here rather than through ``Bench.measure``: its reconciliation
counts one upstream call per client request, and a background POST is answered before its
upstream call (and a flex request's call is a Message Batch). The interactive clients' run
is still a phase of the report (``phase_result``); its upstream figures are the simulator's
over the whole phase, all loads together. The arithmetic, pure, is in the functions below
(``tests/test_bench_mixed.py``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import httpx2
import trio

from .harness import MODEL, Bench, target_for
from .load import Outcome, Run, Tally, Target, closed_driver, closed_loop, open_loop
from .processes import Stack, running_stack
from .results import Check, ScenarioResult
from .stats import phase_result, summary_ms, upstream_delta
from .wire import Pool

__all__ = [
    "background_summary",
    "flex_delta",
    "interactive_summary",
    "lanes_delta",
    "run_mixed",
    "saved_usd",
    "side_by_side",
    "verdicts",
]

REPLY_MS: Final = 100
JITTER: Final = 0.2
MAX_INFLIGHT: Final = 8
MAX_QUEUE: Final = 2000
ACQUIRE_TIMEOUT_S: Final = 120
INTERACTIVE_CLIENTS: Final = 4
BACKGROUND_RATE: Final = (
    70.0  # a second: with the interactive clients' ~40/s, past the 80/s the gate passes
)
FLEX_RATE: Final = 5.0
DRAIN_S: Final = 120.0
_POLL_S: Final = 0.25
_FINISHED: Final = frozenset({"completed", "failed", "cancelled", "incomplete"})

VARIANTS: Final[Mapping[str, Mapping[str, str]]] = {
    name: {
        "LANES_ENABLED": flag,
        "MAX_INFLIGHT": str(MAX_INFLIGHT),
        "MAX_QUEUE": str(MAX_QUEUE),
        "ACQUIRE_TIMEOUT_S": str(ACQUIRE_TIMEOUT_S),
    }
    for name, flag in (("lanes-on", "1"), ("lanes-off", "0"))
}


# -- the arithmetic (pure) --------------------------------------------------------------------


def interactive_summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The interactive clients' view: requests, successes, failures by status, and the p50,
    p99 and max of the successes' latency (ms, from the send: a closed loop)."""
    ok = [o for o in outcomes if o.kind == "ok"]
    latency = summary_ms(o.latency for o in ok)
    failures = Counter(
        f"{o.status} {o.code}" if o.code else str(o.status) for o in outcomes if o.kind != "ok"
    )
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "failures": dict(sorted(failures.items())),
        "p50_ms": latency.p50,
        "p99_ms": latency.p99,
        "max_ms": latency.max,
    }


def background_summary(
    posted: Sequence[tuple[int, str | None]], final: Mapping[str, str]
) -> dict[str, Any]:
    """What became of the background requests.

    Args:
      posted: each POST's status and, when it was accepted (200), the response's id.
      final: the last status polled for each accepted id (``queued``, ``in_progress``,
        ``completed``, ``failed``, ``cancelled``, ``incomplete``).

    Returns:
      ``sent``; ``accepted`` (answered 200 with an id); ``refused`` by HTTP status (a
      gateway without background responses answers 400); the accepted ones by final status;
      ``finished`` (in a terminal status) and ``unfinished`` (still queued or in progress
      when the drain gave up: what starvation would look like).
    """
    accepted = [rid for status, rid in posted if status == 200 and rid is not None]
    refused = Counter(str(status) for status, rid in posted if status != 200 or rid is None)
    statuses = Counter(final.get(rid, "unknown") for rid in accepted)
    finished = sum(n for status, n in statuses.items() if status in _FINISHED)
    return {
        "sent": len(posted),
        "accepted": len(accepted),
        "refused": dict(sorted(refused.items())),
        "by_status": dict(sorted(statuses.items())),
        "completed": statuses.get("completed", 0),
        "finished": finished,
        "unfinished": len(accepted) - finished,
    }


def _numeric_delta(before: Any, after: Any) -> Any:
    if isinstance(after, bool):
        return None
    if isinstance(after, int | float):
        base = before if isinstance(before, int | float) and not isinstance(before, bool) else 0
        return round(after - base, 9)
    if isinstance(after, Mapping):
        was = before if isinstance(before, Mapping) else {}
        delta = {str(k): _numeric_delta(was.get(k), v) for k, v in after.items()}
        return {k: v for k, v in delta.items() if v is not None and v != {}}
    return None


def flex_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the ``flex`` block of ``/metrics`` counted during a phase: every number in it,
    after minus before (nested blocks alike); ``None`` when the gateway has no such block."""
    if not isinstance(after.get("flex"), Mapping):
        return None
    delta = _numeric_delta(before.get("flex"), after["flex"])
    return delta if isinstance(delta, dict) else {}


def saved_usd(delta: Mapping[str, Any] | None) -> float | None:
    """The savings of a ``flex_delta``: its ``cost.saved_usd`` (what the flex requests'
    tokens would have cost realtime, less what they cost at the batch price); ``None``
    when the block has no such figure."""
    if delta is None:
        return None
    cost = delta.get("cost")
    value = cost.get("saved_usd") if isinstance(cost, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def lanes_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any] | None:
    """Per lane, what the ``lanes`` block of ``/metrics`` counted during a phase (admitted and
    shed, after minus before) and its queue wait p95 at the end (ms, over the recent window);
    ``None`` when the gateway has no lanes."""
    lanes_after = after.get("lanes")
    if not isinstance(lanes_after, Mapping):
        return None
    lanes_before = before.get("lanes") if isinstance(before.get("lanes"), Mapping) else {}
    out: dict[str, Any] = {}
    for lane, entry in lanes_after.items():
        was = lanes_before.get(lane, {}) if isinstance(lanes_before, Mapping) else {}
        out[lane] = {
            "admitted": int(entry.get("admitted", 0)) - int(was.get("admitted", 0)),
            "shed": int(entry.get("shed", 0)) - int(was.get("shed", 0)),
            "queue_wait_p95_ms": (entry.get("queue_wait_ms") or {}).get("p95"),
        }
    return out


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return round(value / base, 2)


_TABLE_ROWS: Final = (
    ("interactive requests", ("interactive", "requests")),
    ("interactive failures", ("interactive", "failures")),
    ("interactive p50 (ms)", ("interactive", "p50_ms")),
    ("interactive p99 (ms)", ("interactive", "p99_ms")),
    ("p50 / alone", ("interactive", "p50_vs_alone")),
    ("p99 / alone", ("interactive", "p99_vs_alone")),
    ("background sent", ("background", "sent")),
    ("background accepted", ("background", "accepted")),
    ("background refused", ("background", "refused")),
    ("background completed", ("background", "completed")),
    ("background unfinished", ("background", "unfinished")),
    ("flex requests", ("flex", "requests")),
    ("flex failures", ("flex", "failures")),
    ("flex p50 (ms)", ("flex", "p50_ms")),
    ("flex saved (USD, /metrics)", ("flex", "saved_usd")),
    ("admitted, deferrable lane", ("lanes", "deferrable_admitted")),
    ("queue wait p95, interactive (ms)", ("lanes", "interactive_wait_p95_ms")),
    ("queue wait p95, deferrable (ms)", ("lanes", "deferrable_wait_p95_ms")),
)


def variant_row(
    interactive: Mapping[str, Any],
    alone: Mapping[str, Any],
    background: Mapping[str, Any],
    flex: Mapping[str, Any],
    lanes: Mapping[str, Any] | None,
) -> dict[str, dict[str, Any]]:
    """One variant's figures, grouped as the side-by-side table reads them."""
    lanes = lanes or {}
    return {
        "interactive": {
            **interactive,
            "p50_vs_alone": _ratio(interactive.get("p50_ms"), alone.get("p50_ms")),
            "p99_vs_alone": _ratio(interactive.get("p99_ms"), alone.get("p99_ms")),
        },
        "background": dict(background),
        "flex": dict(flex),
        "lanes": {
            "deferrable_admitted": (lanes.get("deferrable") or {}).get("admitted"),
            "interactive_wait_p95_ms": (lanes.get("interactive") or {}).get("queue_wait_p95_ms"),
            "deferrable_wait_p95_ms": (lanes.get("deferrable") or {}).get("queue_wait_p95_ms"),
        },
    }


def side_by_side(
    alone: Mapping[str, Any], on: Mapping[str, Any], off: Mapping[str, Any]
) -> dict[str, Any]:
    """The two variants and the unloaded baseline as one table (``{"columns", "rows"}``)."""
    rows = []
    for label, (group, key) in _TABLE_ROWS:
        base = alone.get(key) if group == "interactive" else None
        rows.append([label, base, on[group].get(key), off[group].get(key)])
    return {"columns": ["", "interactive alone", "lanes ON", "lanes OFF"], "rows": rows}


def deferrable_reached_the_gate(on: Mapping[str, Any]) -> bool:
    """Whether the lanes had anything to act on in the lanes-on phase."""
    admitted = on["lanes"].get("deferrable_admitted")
    return bool(on["background"].get("accepted")) or bool(admitted)


def verdicts(on: Mapping[str, Any], off: Mapping[str, Any]) -> tuple[list[Check], list[str]]:
    """The checks the scenario makes, and the notes for what it could not check.

    Always: no interactive request failed, in either variant. When deferrable work reached
    the gate: with lanes on the interactive p99 is below lanes off's, and no accepted
    background response was left unfinished.
    """
    checks = [
        Check(
            f"{name}: every interactive request answered 200",
            not variant["interactive"]["failures"],
            {},
            variant["interactive"]["failures"],
            "client failures by status and code",
        )
        for name, variant in (("lanes-on", on), ("lanes-off", off))
    ]
    notes: list[str] = []
    if not deferrable_reached_the_gate(on):
        notes.append(
            "No deferrable request reached the gate (no background response accepted, nothing "
            "admitted in the deferrable lane): this gateway has no background responses or "
            "flex fallback yet, so lanes on and off saw the same load and the comparison "
            "below measures nothing about the lanes."
        )
        return checks, notes
    p99_on, p99_off = on["interactive"]["p99_ms"], off["interactive"]["p99_ms"]
    checks.append(
        Check(
            "lanes on: interactive p99 below lanes off",
            p99_on is not None and p99_off is not None and p99_on < p99_off,
            f"< {p99_off} ms (lanes off)",
            p99_on,
            "interactive clients' p99 under the same deferrable load",
        )
    )
    checks.append(
        Check(
            "lanes on: every accepted background response finished (no starvation)",
            on["background"]["unfinished"] == 0,
            0,
            on["background"]["unfinished"],
            f"still queued or in progress {DRAIN_S:g} s after the phase",
        )
    )
    return checks, notes


# -- the load ---------------------------------------------------------------------------------


def _flex_target(url: str) -> Target:
    body: dict[str, object] = {
        "model": MODEL,
        "max_completion_tokens": 64,
        "service_tier": "flex",
        "messages": [{"role": "user", "content": "A flex request: reply with a few words."}],
    }
    return Target.build(
        "proxy", url, "/v1/chat/completions", [("content-type", "application/json")], body
    )


def _background_body(i: int) -> bytes:
    body = {
        "model": MODEL,
        "input": f"Background request {i}: reply with a few words.",
        "max_output_tokens": 64,
        "background": True,
        "store": True,
    }
    return json.dumps(body, separators=(",", ":")).encode()


async def _background(
    http: httpx2.AsyncClient, url: str, rate: float, seconds: float
) -> list[tuple[int, str | None]]:
    """POST background responses at ``rate`` a second for ``seconds`` (an open loop)."""
    posted: list[tuple[int, str | None]] = []
    start = trio.current_time()

    async def one(i: int) -> None:
        try:
            response = await http.post(
                f"{url}/v1/responses",
                content=_background_body(i),
                headers={"content-type": "application/json"},
            )
        except httpx2.HTTPError:
            posted.append((0, None))
            return
        rid = None
        if response.status_code == 200:
            data = response.json()
            rid = data.get("id") if isinstance(data, dict) else None
        posted.append((response.status_code, rid if isinstance(rid, str) else None))

    async with trio.open_nursery() as nursery:
        for i in range(max(1, math.floor(rate * seconds))):
            await trio.sleep_until(start + i / rate)
            nursery.start_soon(one, i)
    return posted


async def _drain(
    http: httpx2.AsyncClient, url: str, ids: Iterable[str], seconds: float
) -> dict[str, str]:
    """Poll each background response until it is finished, for at most ``seconds``."""
    final = dict.fromkeys(ids, "queued")
    limiter = trio.CapacityLimiter(32)

    async def poll(rid: str) -> None:
        async with limiter:
            response = await http.get(f"{url}/v1/responses/{rid}")
        if response.status_code == 200:
            status = response.json().get("status")
            if isinstance(status, str):
                final[rid] = status

    with trio.move_on_after(seconds):
        while pending := [rid for rid, status in final.items() if status not in _FINISHED]:
            async with trio.open_nursery() as nursery:
                for rid in pending:
                    nursery.start_soon(poll, rid)
            await trio.sleep(_POLL_S)
    return final


async def _mixed_phase(
    bench: Bench, scenario: ScenarioResult, stack: Stack, variant: str, alone: Mapping[str, Any]
) -> dict[str, Any]:
    opts = bench.options
    seconds = opts.phase_s
    server = stack.proxies[variant]
    interactive = target_for("proxy", server.url)
    flex = _flex_target(server.url)
    pool = Pool(interactive.host, interactive.port)
    flex_pool = Pool(flex.host, flex.port)
    limits = httpx2.Limits(max_connections=256, max_keepalive_connections=64)
    http = httpx2.AsyncClient(trust_env=False, timeout=60.0, limits=limits)
    name = f"mixed-{variant}"
    try:
        await bench.warmup(pool, interactive, INTERACTIVE_CLIENTS, opts.warmup_s)
        await server.wait_idle()
        await bench.sim_idle(stack)
        await stack.sim.reset()
        sim_before = await stack.sim.stats()
        metrics_before = await server.metrics()
        tally = Tally()
        runs: dict[str, Any] = {}

        async def interactive_load() -> None:
            runs["interactive"] = await closed_loop(
                pool, interactive, workers=INTERACTIVE_CLIENTS, duration=seconds, tally=tally
            )

        async def flex_load() -> None:
            runs["flex"] = await open_loop(flex_pool, flex, rate=FLEX_RATE, duration=seconds)

        async def background_load() -> None:
            runs["background"] = await _background(http, server.url, BACKGROUND_RATE, seconds)

        label = (
            f"{name}: {INTERACTIVE_CLIENTS} interactive clients, background "
            f"{BACKGROUND_RATE:g}/s, flex {FLEX_RATE:g}/s"
        )
        async with bench.display.phase(label, seconds, tally), trio.open_nursery() as nursery:
            nursery.start_soon(interactive_load)
            nursery.start_soon(flex_load)
            nursery.start_soon(background_load)
        posted: list[tuple[int, str | None]] = runs["background"]
        ids = [rid for status, rid in posted if status == 200 and rid is not None]
        final = await _drain(http, server.url, ids, DRAIN_S)
        metrics_after = await server.wait_idle()
        sim_after = await bench.sim_idle(stack)
    finally:
        await pool.aclose()
        await flex_pool.aclose()
        await http.aclose()
    run: Run = runs["interactive"]
    result = phase_result(
        name,
        run,
        via="proxy",
        proxy=variant,
        stream=False,
        upstream=upstream_delta(sim_before, sim_after),
        cpu=None,
    )
    scenario.phases.append(result)
    delta = flex_delta(metrics_before, metrics_after)
    flex_summary = {**interactive_summary(runs["flex"].outcomes), "saved_usd": saved_usd(delta)}
    scenario.traces[variant] = {
        "settings": dict(server.env),
        "flex_metrics_delta": delta,
        "lanes_metrics_delta": lanes_delta(metrics_before, metrics_after),
    }
    return variant_row(
        interactive_summary(run.outcomes),
        alone,
        background_summary(posted, final),
        flex_summary,
        lanes_delta(metrics_before, metrics_after),
    )


async def run_mixed(bench: Bench, scenario: ScenarioResult) -> None:
    """The scenario: the interactive baseline, then the mixed load through each variant."""
    seconds = bench.options.phase_s
    sim_args = [
        "--ttft-ms", str(REPLY_MS), "--tokens-per-s", "0", "--jitter", str(JITTER),
        "--seed", "31",
    ]  # fmt: skip
    proxies = {name: dict(settings) for name, settings in VARIANTS.items()}
    scenario.config = {
        "simulator": sim_args,
        "proxies": proxies,
        "interactive_clients": INTERACTIVE_CLIENTS,
        "background_per_s": BACKGROUND_RATE,
        "flex_per_s": FLEX_RATE,
        "capacity_per_s": MAX_INFLIGHT * 1000 / REPLY_MS,
        "phase_s": seconds,
        "drain_s": DRAIN_S,
    }
    async with running_stack(sim_args, proxies, bench.options.log_dir / "mixed") as stack:
        target = target_for("proxy", stack.proxies["lanes-on"].url)
        pool = Pool(target.host, target.port)
        try:
            await bench.warmup(pool, target, INTERACTIVE_CLIENTS, bench.options.warmup_s)
            phase = await bench.measure(
                scenario,
                stack,
                "alone",
                closed_driver(pool, target, INTERACTIVE_CLIENTS, seconds),
                target=target,
                proxy="lanes-on",
                label=f"alone: {INTERACTIVE_CLIENTS} interactive clients, closed loop",
                seconds=seconds,
            )
        finally:
            await pool.aclose()
        alone = interactive_summary(phase.run.outcomes)
        on = await _mixed_phase(bench, scenario, stack, "lanes-on", alone)
        off = await _mixed_phase(bench, scenario, stack, "lanes-off", alone)
    scenario.summary = {
        "alone": alone,
        "lanes-on": on,
        "lanes-off": off,
        "side_by_side": side_by_side(alone, on, off),
    }
    checks, notes = verdicts(on, off)
    scenario.checks += checks
    scenario.notes += notes
