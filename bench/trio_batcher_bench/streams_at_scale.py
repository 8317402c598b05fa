"""The ``streams-at-scale`` scenario: many long, sparse streams open at once.

Theory of operation
-------------------
Agent and IDE traffic holds streams open for a minute with an event now and then
(thinking, tool use). One simulator paces every reply at ``EVENTS_PER_S`` content events a
second, the first after one interval, for the phase's seconds (``[[sim:tokens=N]]`` in the
prompt sets the reply's length); two proxies with default settings (batching and the gate
off) stand in front of it, one per door, each its own process so one door's memory is not
the other's baseline. Three phases, each ``N`` streams (1,000; ``--quick`` 200 for 15 s;
``--concurrency`` and ``--duration`` override) opened one by one over ``RAMP_S``, each on
its own connection, held open until the reply ends:

- ``direct``: the Anthropic Messages request straight to the simulator;
- ``proxy``: the same question through the first proxy's OpenAI Chat door
  (``/v1/chat/completions``, ``stream: true``), every upstream event translated;
- ``anthropic-proxy``: the Messages request through the second proxy's ``/v1/messages``,
  relayed unchanged.

A stream succeeds only if it is answered 200 and ends whole (``data: [DONE]`` in Chat,
``message_stop`` in Messages) with no error event; anything else is an error. During a
proxy phase a task of the phase's nursery reads the proxy's ``VmRSS`` and CPU seconds every
``SAMPLE_S`` along with how many streams are open (answered, not yet ended); the idle baseline is read
the same way just before the phase, after a few short warm-up streams have paid for the
imports and first-use caches. ``streams_at_scale_stats`` turns the samples into RSS per
open stream and the phases into the added inter-event gap, over the whole phase and in the
steady state (while every stream was open: the ramp's requests are paid for by then).

Every connection is a file descriptor in the load generator: this process raises its soft
``RLIMIT_NOFILE`` the way ``serve`` does before it starts the servers, which inherit it
(the simulator holds one descriptor per stream too).
"""

from __future__ import annotations

from typing import Final, Literal, final

import trio

from trio_batcher.observatory.gc_pauses import GcPauses
from trio_batcher.serving import raise_open_file_limit

from .cpu import process_cpu_seconds
from .harness import Bench, Driver, target_for, target_result
from .load import Outcome, Run, Tally, Target, follow_stream, tallied
from .processes import ProxyServer, Stack, running_stack
from .results import PhaseResult, ScenarioResult
from .sse import StreamEnding
from .streams_at_scale_stats import (
    ADDED_GAP_P99_MAX_MS,
    EVENTS_PER_S,
    RSS_PER_STREAM_MAX_KIB,
    RssSample,
    door_summary,
    gc_delta,
    late_gaps_by_second,
    plateau,
    side_by_side,
    steady_gaps,
    steady_window,
)
from .wire import Connection, ProtocolError

__all__ = ["OpenStreams", "one_stream", "plan_of", "ramped_driver", "run_streams_at_scale"]

SIM_ARGS: Final = ("--ttft-ms", str(int(1000 / EVENTS_PER_S)), "--tokens-per-s", str(EVENTS_PER_S))
RAMP_S: Final = 2.0
SAMPLE_S: Final = 0.2
IDLE_S: Final = 1.0
WARMUP_STREAMS: Final = 5
STREAM_SLACK_S: Final = 60.0  # a stream's deadline beyond its planned length
FD_MARGIN: Final = 64
Dialect = Literal["openai", "anthropic"]
DOORS: Final[dict[str, Dialect]] = {"chat": "openai", "messages": "anthropic"}
_PHASE: Final = {"chat": "proxy", "messages": "anthropic-proxy"}
_FAST: Final = "[[sim:tokens=3,ttft_ms=0,tokens_per_s=0]]"


@final
class OpenStreams:
    """How many streams are open now: answered with 200 and not yet ended."""

    def __init__(self) -> None:
        self.now = 0


def _target(via: Literal["simulator", "proxy"], url: str, dialect: Dialect, tag: str) -> Target:
    text = f"Keep this stream open, think aloud sparsely. {tag}"
    return target_for(via, url, stream=True, text=text, max_tokens=4096, dialect=dialect)


async def one_stream(
    target: Target, intended: float, open_streams: OpenStreams, deadline_s: float
) -> Outcome:
    """One stream on a connection of its own, followed to its end (never raises for what
    the server or the network did: those are outcomes)."""
    sent = trio.current_time()
    outcome = Outcome(intended, sent, sent, 0, "error")
    try:
        with trio.move_on_after(deadline_s) as timeout:
            conn = Connection(await trio.open_tcp_stream(target.host, target.port))
            try:
                await _exchange(conn, target, outcome, open_streams)
            finally:
                await conn.aclose()
        if timeout.cancelled_caught:
            outcome.kind, outcome.code = "error", "client_timeout"
    except (OSError, ProtocolError, trio.BrokenResourceError) as exc:
        outcome.kind, outcome.code = "error", type(exc).__name__
    finally:
        outcome.done = trio.current_time()
    return outcome


async def _exchange(
    conn: Connection, target: Target, outcome: Outcome, open_streams: OpenStreams
) -> None:
    """Send, read the head, then the stream, counted open from its head to its end."""
    await conn.send(target.request)
    head = await conn.read_head()
    outcome.status = head.status
    outcome.server_timing = head.headers.get(b"server-timing")
    if head.status != 200:
        await conn.read_body(head)  # counted by status (``http_<status>``)
        return
    ending = StreamEnding(target.api)
    open_streams.now += 1
    try:
        await follow_stream(conn, head, target, outcome, ending=ending)
    finally:
        open_streams.now -= 1
    if ending.error_type is not None:
        outcome.code = ending.error_type
    elif not ending.complete:
        outcome.code = "truncated"
    else:
        outcome.kind = "ok"


def ramped_driver(
    target: Target, streams: int, ramp_s: float, deadline_s: float, open_streams: OpenStreams
) -> Driver:
    """``streams`` streams, stream ``i`` started at ``i / streams`` of the ramp."""

    async def drive(tally: Tally) -> Run:
        outcomes: list[Outcome] = []
        start = trio.current_time() + 0.01

        async def one(i: int) -> None:
            intended = start + ramp_s * i / streams
            await trio.sleep_until(intended)
            await tallied(
                tally, outcomes, lambda: one_stream(target, intended, open_streams, deadline_s)
            )

        async with trio.open_nursery() as nursery:
            for i in range(streams):
                nursery.start_soon(one, i)
        return Run(
            outcomes,
            start,
            trio.current_time(),
            offered=streams,
            mode="closed",
            concurrency=streams,
        )

    return drive


def rss_kib(pid: int) -> int:
    """``VmRSS`` of ``pid`` in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def sample_rss(pid: int, open_streams: OpenStreams, samples: list[RssSample]) -> None:
    """Append a reading every ``SAMPLE_S`` until cancelled."""
    while True:
        now, rss = trio.current_time(), rss_kib(pid)
        samples.append(RssSample(now, rss, open_streams.now, process_cpu_seconds(pid)))
        await trio.sleep(SAMPLE_S)


async def _idle_kib(proxy: ProxyServer) -> float:
    """The proxy's median RSS over ``IDLE_S`` with nothing in flight."""
    await proxy.wait_idle()
    samples: list[RssSample] = []
    with trio.move_on_after(IDLE_S):
        await sample_rss(proxy.pid, OpenStreams(), samples)
    readings = sorted(s.rss_kib for s in samples)
    return float(readings[len(readings) // 2])


async def _warm_up(target: Target) -> None:
    """A few short streams nobody counts: imports and first-use caches land in the baseline."""
    async with trio.open_nursery() as nursery:
        for _ in range(WARMUP_STREAMS):
            nursery.start_soon(one_stream, target, trio.current_time(), OpenStreams(), 10.0)


def _fd_limit(streams: int) -> int | None:
    """Raise the soft open-file limit (as ``serve`` does) and check it fits the streams;
    the limit now (None where there is no such limit to read).

    Raises:
      RuntimeError: even the raised limit is below what ``streams`` connections need.
    """
    raise_open_file_limit()
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < streams + FD_MARGIN:
        raise RuntimeError(
            f"open-file limit {soft} is too low for {streams} streams (raise the hard limit)"
        )
    return soft


async def _phase(
    bench: Bench,
    scenario: ScenarioResult,
    stack: Stack,
    door: str | None,
    plan: tuple[int, float, float],
) -> tuple[PhaseResult, list[RssSample], float | None]:
    """One phase of the plan's streams: through ``door``'s proxy, or direct (None); its
    result, the proxy's RSS samples and its idle RSS (KiB)."""
    streams, seconds, ramp_s = plan
    tokens = max(2, round(seconds * EVENTS_PER_S))
    via: Literal["simulator", "proxy"]
    dialect: Dialect
    if door is None:
        name, url, via, dialect = "direct", stack.sim.url, "simulator", "anthropic"
    else:
        name, url, via, dialect = _PHASE[door], stack.proxies[door].url, "proxy", DOORS[door]
    target = _target(via, url, dialect, f"[[sim:tokens={tokens}]]")
    await _warm_up(_target(via, url, dialect, _FAST))
    samples: list[RssSample] = []
    open_streams = OpenStreams()
    idle: float | None = None
    sample = None
    if door is not None:
        proxy = stack.proxies[door]
        idle = await _idle_kib(proxy)

        async def sample() -> None:
            await sample_rss(proxy.pid, open_streams, samples)

    client_gc = GcPauses()  # a pause of the load generator delays every stream's events too
    client_gc.install()
    try:
        phase = await bench.measure(
            scenario,
            stack,
            name,
            ramped_driver(target, streams, ramp_s, seconds + STREAM_SLACK_S, open_streams),
            target=target,
            proxy=door,
            label=f"{name}: {streams} streams, {EVENTS_PER_S:g} events/s for {seconds:g} s",
            seconds=seconds + ramp_s,
            concurrent=sample,
        )
    finally:
        client_gc.uninstall()
    window = steady_window(phase.run.outcomes)
    extra = phase.result.extra
    extra["steady_gap_ms"] = steady_gaps(phase.run.outcomes, window)
    extra["all_open_after_s"] = None if window is None else round(window[0] - phase.run.started, 3)
    extra["steady_s"] = None if window is None else round(window[1] - window[0], 3)
    extra["late_gaps_by_second"] = late_gaps_by_second(phase.run.outcomes, phase.run.started)
    extra["client_gc"] = gc_delta(
        {"gc": GcPauses().statistics().to_json()}, {"gc": client_gc.statistics().to_json()}
    )
    if door is not None:
        extra["gc"] = gc_delta(phase.metrics_before, phase.metrics_after)
    return phase.result, samples, idle


def plan_of(bench: Bench) -> tuple[int, float, float]:
    """(streams, seconds, ramp seconds): 1,000 for 60 s, ``--quick`` 200 for 15 s, unless
    ``--concurrency`` / ``--duration`` say otherwise; the ramp is at most a fifth of it."""
    opts = bench.options
    streams = opts.concurrency or (200 if opts.quick else 1000)
    seconds = opts.duration if opts.duration is not None else (15.0 if opts.quick else 60.0)
    return streams, seconds, min(RAMP_S, seconds / 5)


async def run_streams_at_scale(bench: Bench, scenario: ScenarioResult) -> None:
    """The scenario: ``direct``, then each door's proxy phase (see the module's docstring)."""
    plan = streams, seconds, ramp_s = plan_of(bench)
    scenario.config = {
        "simulator": list(SIM_ARGS),
        "proxies": {door: {} for door in DOORS},
        "streams": streams,
        "seconds": seconds,
        "ramp_s": ramp_s,
        "events_per_s": EVENTS_PER_S,
        "sample_s": SAMPLE_S,
        "open_file_limit": _fd_limit(streams),
    }
    log_dir = bench.options.log_dir / "streams-at-scale"
    results: dict[str, tuple[PhaseResult, list[RssSample], float | None]] = {}
    async with running_stack(list(SIM_ARGS), {door: {} for door in DOORS}, log_dir) as stack:
        direct, _, _ = await _phase(bench, scenario, stack, None, plan)
        for door in DOORS:
            results[door] = await _phase(bench, scenario, stack, door, plan)
    doors = {
        door: door_summary(streams, direct, proxy, idle, plateau(samples))
        for door, (proxy, samples, idle) in results.items()
    }
    chat = doors["chat"]
    scenario.summary = {
        "streams": streams,
        "seconds": seconds,
        "events_per_s": EVENTS_PER_S,
        "rss_per_open_stream_kib": chat["rss_per_open_stream_kib"],
        "errors_proxy": chat["errors_proxy"],
        "added_gap_p99_ms": chat["added_gap_p99_ms"],
        "added_steady_gap_p99_ms": chat["added_steady_gap_p99_ms"],
        "proxy_cpu_ms_per_upstream_event": chat["proxy_cpu_ms_per_upstream_event"],
        "proxy_cores_all_open": chat["proxy_cores_all_open"],
        "doors": doors,
        "side_by_side": side_by_side(doors),
    }
    for door, label in (("chat", ""), ("messages", ", Anthropic Messages")):
        figures = doors[door]
        scenario.targets += [
            target_result(
                f"proxy RSS per open stream{label}",
                f"<= {RSS_PER_STREAM_MAX_KIB:g} KiB",
                figures["rss_per_open_stream_kib"],
                "KiB",
                lambda v: v <= RSS_PER_STREAM_MAX_KIB,
            ),
            target_result(
                f"streams that did not end whole{label}",
                "== 0",
                figures["errors_proxy"],
                "streams",
                lambda v: v == 0,
            ),
            target_result(
                f"inter-event gap the proxy adds (p99){label}",
                f"<= {ADDED_GAP_P99_MAX_MS:g} ms",
                figures["added_gap_p99_ms"],
                "ms",
                lambda v: v <= ADDED_GAP_P99_MAX_MS,
            ),
            target_result(
                f"inter-event gap the proxy adds (p99), all streams open{label}",
                f"<= {ADDED_GAP_P99_MAX_MS:g} ms",
                figures["added_steady_gap_p99_ms"],
                "ms",
                lambda v: v <= ADDED_GAP_P99_MAX_MS,
            ),
        ]
