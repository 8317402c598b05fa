"""The ``stream`` scenario: streamed replies direct and through the proxy, in both dialects.

Theory of operation
-------------------
One simulator streams 24-token replies (first token at 50 ms, then 100 tokens/s); one
proxy (batching and the gate off) stands in front of it. Two *pairs* of closed-loop phases
run under the same load, one after the other:

- **OpenAI** (``direct``, ``proxy``): the Anthropic Messages request straight to the
  simulator, then the same question through the proxy's ``/v1/chat/completions``, every
  upstream event translated into OpenAI chunks.
- **Anthropic** (``anthropic-direct``, ``anthropic-proxy``): the same Messages request,
  byte for byte (but for ``Host``), straight to the simulator and then through the proxy's
  ``/v1/messages``, which relays every upstream event unchanged.

Then both pairs again with ``LIGHT_CLIENTS`` clients, a load nothing saturates. Each
direct phase sits next to its proxy phase in time, so a neighbour's burst on a shared
machine hits a pair rather than one side of a comparison; the two direct phases ask the
same thing, so their difference is the run's own noise.

What is compared, per pair (``pair_summary``): TTFT (send to the first content event),
inter-token latency, the gaps between consecutive SSE events of any kind, the stream's
total time, events per stream and per second, and three views of what relaying costs per
event, proxy minus direct:

- ``added_ms_per_event``: how much later, on average, each SSE event reached the client
  through the proxy (event ``i`` against event ``i``; only where both sides carry the same
  events, i.e. the Anthropic pair). ``added_ms_per_content_event`` is the same over
  content events only, which both dialects have one for one. Both include the proxy's
  request path, paid once before the upstream even starts: the upstream paces the events,
  so a delay does not accumulate from event to event, and total time divided by the event
  count would mean nothing.
- The upstream timing (``upstream_timing``): each stream matched by request id to the
  simulator's trace of its call gives the request path (client send to upstream arrival)
  and the *relay lag* of its first content event and of its last event (the simulator
  handing the bytes to its server to the client receiving them). Proxy minus direct, the
  lag is what relaying one event costs, without the request path.
- ``proxy_cpu_ms_per_event``: the proxy's CPU per stream over the upstream events in it
  (an upper bound: the request's fixed cost is included).

``first_event_mean_ms`` is when the first event of any kind arrived: the simulator sends
the prelude (``message_start``, ``ping``, ``content_block_start``) as soon as a request
arrives, so a relay that holds it back until the first content event shows up there, and
in ``added_ms_per_event``, but not in TTFT.

Checks beyond every phase's reconciliation: through ``/v1/messages`` every stream carried
exactly the events and bytes the simulator sends directly, and one stream each way, read
whole after the phases, is byte-identical once the random message id is masked.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from .harness import LIGHT_CLIENTS, Bench, Phase, monotonic_offset, target_for, target_result
from .load import Target
from .processes import running_stack
from .results import Check, PhaseResult, ScenarioResult, Summary
from .stats import summary_ms
from .wire import Pool

__all__ = ["ADDED_TTFT_MAX_MS", "pair_summary", "run_stream", "side_by_side", "upstream_timing"]

ADDED_TTFT_MAX_MS: Final = 2.0
SIM_ARGS: Final = ("--ttft-ms", "50", "--tokens-per-s", "100")
RECENT_TRACES: Final = 1000  # all the simulator keeps (simulator.stats.RECENT_TRACES)
PATHS: Final = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
_MESSAGE_ID: Final = re.compile(rb'"id": ?"msg_[0-9A-Za-z_]+"')

Dialect = Literal["openai", "anthropic"]


def _names(dialect: Dialect, suffix: str) -> tuple[str, str]:
    prefix = "" if dialect == "openai" else f"{dialect}-"
    return f"{prefix}direct{suffix}", f"{prefix}proxy{suffix}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 3)


def _p(summary: Summary | None, key: Literal["p50", "p99", "mean"] = "p50") -> float | None:
    return None if summary is None else getattr(summary, key)


def _mean_difference(direct: list[float], proxy: list[float]) -> float | None:
    """Mean of ``proxy[i] - direct[i]``: profiles of the same events, else ``None``."""
    if not direct or len(direct) != len(proxy):
        return None
    return round(sum(p - d for d, p in zip(direct, proxy, strict=True)) / len(direct), 3)


def upstream_timing(phase: Phase, offset: float) -> dict[str, Any]:
    """The phase's successful streams against the simulator's traces of their calls.

    Matched by the upstream's request id (``request-id``, relayed by the proxy, or
    ``x-request-id`` from its OpenAI door); ``offset`` maps the load generator's trio clock
    onto ``time.monotonic()``, which the simulator stamps its traces with. Streams beyond
    the traces the simulator keeps go unmatched (``matched`` says how many were).
    """
    traces = {
        t["request_id"]: t
        for t in phase.sim_after.get("recent", [])
        if t.get("outcome") == "completed" and t.get("first_token_at") is not None
    }
    path: list[float] = []
    first: list[float] = []
    last: list[float] = []
    ok = [o for o in phase.run.outcomes if o.kind == "ok"]
    for o in ok:
        trace = traces.get(o.request_id.decode("latin-1")) if o.request_id else None
        if trace is None or o.first_content is None:
            continue
        path.append(trace["started_at"] - (o.sent + offset))
        first.append(o.first_content + offset - trace["first_token_at"])
        last.append(o.done + offset - trace["finished_at"])
    return {
        "streams": len(ok),
        "matched": len(path),
        "request_path_ms": summary_ms(path),
        "first_content_lag_ms": summary_ms(first),
        "last_event_lag_ms": summary_ms(last),
    }


def _events(phase: PhaseResult, field: str) -> Any:
    """A field of the phase's ``EventStats`` (every stream phase has them)."""
    assert phase.events is not None, f"{phase.name} is not a streaming phase"
    return getattr(phase.events, field)


def _timing(phase: PhaseResult, key: str) -> float | None:
    timing = phase.extra.get("upstream_timing")
    summary = None if timing is None else timing.get(key)
    return summary.mean if isinstance(summary, Summary) else None


def pair_summary(
    dialect: Dialect, clients: int, direct: PhaseResult, proxy: PhaseResult
) -> dict[str, Any]:
    """One pair's numbers side by side, proxy minus direct where it says ``added``."""
    d, p = direct.events, proxy.events
    upstream_events = d.per_stream[-1] if d is not None and d.per_stream else None
    cpu = proxy.cpu.proxy_ms_per_request

    def both(key: str, pick: Any) -> dict[str, Any]:
        return {f"{key}_direct": pick(direct), f"{key}_proxy": pick(proxy)}

    return {
        "dialect": dialect,
        "path": PATHS[dialect],
        "clients": clients,
        "phases": [direct.name, proxy.name],
        **both("ttft_p50_ms", lambda r: _p(r.ttft_ms)),
        "added_ttft_p50_ms": _delta(_p(direct.ttft_ms), _p(proxy.ttft_ms)),
        "added_ttft_p99_ms": _delta(_p(direct.ttft_ms, "p99"), _p(proxy.ttft_ms, "p99")),
        **both("itl_p50_ms", lambda r: _p(r.itl_ms)),
        **both("event_gap_p50_ms", lambda r: _events(r, "gap_ms").p50),
        **both("event_gap_p99_ms", lambda r: _events(r, "gap_ms").p99),
        **both("events_per_stream", lambda r: _events(r, "per_stream")),
        **both("bytes_per_stream", lambda r: _events(r, "bytes_per_stream")),
        **both("events_per_s", lambda r: _events(r, "per_s")),
        **both("first_event_mean_ms", lambda r: (_events(r, "mean_arrival_ms") or [None])[0]),
        **both("stream_time_p50_ms", lambda r: r.latency_ms.p50),
        "added_stream_time_p50_ms": _delta(direct.latency_ms.p50, proxy.latency_ms.p50),
        **both("streams_per_s", lambda r: r.rates.goodput),
        "proxy_cpu_ms_per_stream": cpu,
        "proxy_cpu_ms_per_event": (
            None if cpu is None or not upstream_events else round(cpu / upstream_events, 4)
        ),
        "added_ms_per_event": (
            None
            if d is None or p is None or d.per_stream != p.per_stream
            else _mean_difference(d.mean_arrival_ms, p.mean_arrival_ms)
        ),
        "added_ms_per_content_event": (
            None
            if d is None or p is None
            else _mean_difference(d.mean_content_arrival_ms, p.mean_content_arrival_ms)
        ),
        "added_request_path_ms": _delta(
            _timing(direct, "request_path_ms"), _timing(proxy, "request_path_ms")
        ),
        "relay_added_first_content_ms": _delta(
            _timing(direct, "first_content_lag_ms"), _timing(proxy, "first_content_lag_ms")
        ),
        "relay_added_last_event_ms": _delta(
            _timing(direct, "last_event_lag_ms"), _timing(proxy, "last_event_lag_ms")
        ),
    }


def _span(value: object) -> object:
    """``[min, max]`` as one number when they agree, ``"min..max"`` otherwise."""
    if isinstance(value, list) and len(value) == 2:
        return value[0] if value[0] == value[1] else f"{value[0]}..{value[1]}"
    return value


_BOTH_ROWS: Final = (
    ("TTFT p50 (ms)", "ttft_p50_ms"),
    ("ITL p50 (ms)", "itl_p50_ms"),
    ("SSE event gap p50 (ms)", "event_gap_p50_ms"),
    ("SSE events per stream", "events_per_stream"),
    ("bytes per stream", "bytes_per_stream"),
    ("SSE events/s received", "events_per_s"),
    ("first SSE event, mean (ms)", "first_event_mean_ms"),
    ("stream time p50 (ms)", "stream_time_p50_ms"),
    ("streams/s", "streams_per_s"),
)
_ADDED_ROWS: Final = (
    ("proxy CPU per stream (ms)", "proxy_cpu_ms_per_stream"),
    ("proxy CPU per upstream event (ms)", "proxy_cpu_ms_per_event"),
    ("added TTFT p50 (ms)", "added_ttft_p50_ms"),
    ("added stream time p50 (ms)", "added_stream_time_p50_ms"),
    ("added delay per SSE event (ms)", "added_ms_per_event"),
    ("added delay per content event (ms)", "added_ms_per_content_event"),
    ("added request path, mean (ms)", "added_request_path_ms"),
    ("added relay lag, first content event, mean (ms)", "relay_added_first_content_ms"),
    ("added relay lag, last event, mean (ms)", "relay_added_last_event_ms"),
)


def side_by_side(openai: dict[str, Any], anthropic: dict[str, Any]) -> dict[str, Any]:
    """Both pairs as one table (``{"columns", "rows"}``, as the report renders it); a
    proxy-minus-direct figure sits in the proxy's column."""
    rows = [
        [label, *(_span(pair[f"{key}_{side}"]) for pair in (openai, anthropic)
                  for side in ("direct", "proxy"))]
        for label, key in _BOTH_ROWS
    ]  # fmt: skip
    rows += [[label, None, openai[key], None, anthropic[key]] for label, key in _ADDED_ROWS]
    return {
        "columns": ["", "OpenAI: direct", "OpenAI: proxy", "Anthropic: direct", "Anthropic: proxy"],
        "rows": rows,
    }


def _relay_check(direct: PhaseResult, proxy: PhaseResult) -> Check:
    d, p = direct.events, proxy.events
    expected = None if d is None else {"events": d.per_stream, "bytes": d.bytes_per_stream}
    actual = None if p is None else {"events": p.per_stream, "bytes": p.bytes_per_stream}
    return Check(
        f"{proxy.name}: every stream carried the simulator's events (count and bytes)",
        expected is not None and bool(expected["events"]) and expected == actual,
        expected,
        actual,
        f"[min, max] per stream, {direct.name} (the simulator's own, expected) vs "
        f"{proxy.name} (actual)",
    )


async def _whole_body(target: Target) -> tuple[int, bytes]:
    pool = Pool(target.host, target.port)
    try:
        conn = await pool.acquire()
        try:
            await conn.send(target.request)
            head = await conn.read_head()
            body = await conn.read_body(head)
        finally:
            await pool.release(conn)
    finally:
        await pool.aclose()
    return head.status, body


async def byte_for_byte(direct: Target, proxied: Target) -> Check:
    """One stream each way, read whole: the same bytes but for the (random) message id."""
    (d_status, d_body), (p_status, p_body) = await _whole_body(direct), await _whole_body(proxied)
    d_masked, p_masked = (_MESSAGE_ID.sub(b'"id":"msg_"', body) for body in (d_body, p_body))
    same = d_status == p_status == 200 and d_masked == p_masked
    detail = f"{len(d_body)} bytes direct, {len(p_body)} through /v1/messages"
    if not same:
        at = next(
            (i for i, (a, b) in enumerate(zip(d_masked, p_masked, strict=False)) if a != b),
            min(len(d_masked), len(p_masked)),
        )
        detail += f"; first difference at byte {at}: {p_masked[at : at + 60]!r}"
    return Check(
        "anthropic: one stream through /v1/messages is the simulator's, byte for byte",
        same,
        f"200, {len(d_masked)} bytes (message id masked)",
        f"{p_status}, {len(p_masked)} bytes" + ("" if same else ", different"),
        detail,
    )


async def run_stream(bench: Bench, scenario: ScenarioResult) -> None:
    """The scenario: both pairs at ``--concurrency`` (20) clients, then at ``LIGHT_CLIENTS``."""
    opts = bench.options
    workers = opts.concurrency or 20
    scenario.config = {
        "simulator": list(SIM_ARGS),
        "proxy": {},
        "clients": workers,
        "light_clients": LIGHT_CLIENTS,
        "pairs": dict(PATHS),
    }
    loads = [
        (workers, "", opts.phase_s, opts.warmup_s),
        (LIGHT_CLIENTS, f"-{LIGHT_CLIENTS}", opts.phase_s / 2, min(opts.warmup_s, 0.5)),
    ]
    pairs: dict[str, tuple[PhaseResult, PhaseResult]] = {}
    async with running_stack(list(SIM_ARGS), {"proxy": {}}, opts.log_dir / "stream") as stack:
        for clients, suffix, seconds, warmup in loads:
            for dialect in ("openai", "anthropic"):
                first, second = await bench.measure_pair(
                    scenario,
                    stack,
                    workers=clients,
                    stream=True,
                    dialect=dialect,
                    names=_names(dialect, suffix),
                    seconds=seconds,
                    warmup=warmup,
                    recent=RECENT_TRACES,
                )
                offset = monotonic_offset()
                for phase in (first, second):
                    phase.result.extra["upstream_timing"] = upstream_timing(phase, offset)
                pairs[dialect + suffix] = (first.result, second.result)
                if dialect == "anthropic":
                    scenario.checks.append(_relay_check(first.result, second.result))
        scenario.checks.append(
            await byte_for_byte(
                target_for("simulator", stack.sim.url, stream=True),
                target_for("proxy", stack.proxies["proxy"].url, stream=True, dialect="anthropic"),
            )
        )
    light = f"-{LIGHT_CLIENTS}"
    summaries = {
        name: pair_summary(
            "openai" if name.startswith("openai") else "anthropic",
            LIGHT_CLIENTS if name.endswith(light) else workers,
            *phases,
        )
        for name, phases in pairs.items()
    }
    direct, proxy = pairs["openai"]
    light_direct, light_proxy = pairs["openai" + light]
    openai, anthropic = summaries["openai"], summaries["anthropic"]
    scenario.summary = {
        # The OpenAI pair's figures under the names they have always had.
        "clients": workers,
        "ttft_p50_direct_ms": _p(direct.ttft_ms),
        "ttft_p50_proxy_ms": _p(proxy.ttft_ms),
        "added_ttft_p50_ms": openai["added_ttft_p50_ms"],
        "added_ttft_p99_ms": openai["added_ttft_p99_ms"],
        "itl_p50_direct_ms": _p(direct.itl_ms),
        "itl_p50_proxy_ms": _p(proxy.itl_ms),
        "itl_p99_direct_ms": _p(direct.itl_ms, "p99"),
        "itl_p99_proxy_ms": _p(proxy.itl_ms, "p99"),
        "streams_per_s_direct": direct.rates.goodput,
        "streams_per_s_proxy": proxy.rates.goodput,
        "proxy_cpu_ms_per_stream": proxy.cpu.proxy_ms_per_request,
        "light_clients": LIGHT_CLIENTS,
        "light_added_ttft_p50_ms": _delta(_p(light_direct.ttft_ms), _p(light_proxy.ttft_ms)),
        "light_itl_p50_direct_ms": _p(light_direct.itl_ms),
        "light_itl_p50_proxy_ms": _p(light_proxy.itl_ms),
        # Both pairs, every figure under the same keys.
        "pairs": summaries,
        "side_by_side": side_by_side(openai, anthropic),
        "light_side_by_side": side_by_side(
            summaries["openai" + light], summaries["anthropic" + light]
        ),
    }
    for label, pair in (("", openai), (", Anthropic Messages", anthropic)):
        scenario.targets.append(
            target_result(
                f"TTFT the proxy adds (p50){label}",
                f"<= {ADDED_TTFT_MAX_MS:g} ms",
                pair["added_ttft_p50_ms"],
                "ms",
                lambda v: v <= ADDED_TTFT_MAX_MS,
            )
        )
    unmatched = [
        p.name
        for phases in pairs.values()
        for p in phases
        if (t := p.extra["upstream_timing"])["matched"] < t["streams"]
    ]
    if unmatched:
        scenario.notes.append(
            f"Upstream timing covers only the streams the simulator kept a trace of (the last "
            f"{RECENT_TRACES}, matched by request id) in: {', '.join(unmatched)}."
        )
