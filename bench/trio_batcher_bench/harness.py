"""The machinery every scenario shares: options, request targets, and measuring a phase.

``Bench.measure`` is the one way a scenario runs load: reset the simulator (so its peak
in-flight gauge covers this phase alone), snapshot the simulator's and the proxy's
counters, run the driver while the CPU meter runs, wait until both servers are idle (so
every request the clients finished is recorded server-side), snapshot again, and turn the
difference into a ``PhaseResult`` plus the checks that reconcile the clients' view with the
servers' (``stats.reconcile``). Warm-up traffic runs before the first snapshot, so it is
never counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, final

import trio

from .cpu import CpuMeter
from .load import Run, Tally, Target, closed_driver, closed_loop
from .processes import SIM_KEY, ProxyServer, ServerError, Stack
from .profiling import profiled, summarize_folded
from .progress import Display
from .results import Check, PhaseResult, ScenarioResult, TargetResult
from .sse import Api
from .stats import phase_result, reconcile, upstream_checks, upstream_delta
from .wire import Pool

__all__ = ["LIGHT_CLIENTS", "MODEL", "Bench", "Options", "Phase", "noise_notes", "target_for"]

MODEL: Final = "claude-sonnet-4-5"
PROMPT: Final = "Benchmark request: reply with a few words."
_IDLE_TIMEOUT_S: Final = 10.0
LIGHT_CLIENTS: Final = 5  # the second pair of overhead and stream: a load nothing saturates
NOISY_OTHER_CORES: Final = 0.25
SATURATED_CLIENT_CORES: Final = 0.9


@final
@dataclass(frozen=True)
class Options:
    """How long and how hard to run. ``None`` means the mode's default."""

    quick: bool = False
    duration: float | None = None
    concurrency: int | None = None
    warmup: float | None = None
    minutes: float | None = None
    log_dir: Path = Path("bench-results/logs")
    profile_dir: Path | None = None
    litellm: Path | None = None  # a LiteLLM proxy executable, for the peers scenario
    storm_retry_after: str = "both"  # failover: storms with retry-after (yes), without, both

    @property
    def phase_s(self) -> float:
        """Seconds of a measured closed-loop phase."""
        return self.duration if self.duration is not None else (3.0 if self.quick else 15.0)

    @property
    def step_s(self) -> float:
        """Seconds of one open-loop step."""
        return self.duration if self.duration is not None else (3.0 if self.quick else 8.0)

    @property
    def soak_s(self) -> float:
        """Seconds of the soak's load (``--minutes``; default 10, quick 2)."""
        minutes = self.minutes if self.minutes is not None else (2.0 if self.quick else 10.0)
        return minutes * 60.0

    @property
    def warmup_s(self) -> float:
        return self.warmup if self.warmup is not None else (0.5 if self.quick else 3.0)


def target_for(
    via: Literal["simulator", "proxy"],
    url: str,
    *,
    stream: bool = False,
    text: str = PROMPT,
    max_tokens: int = 64,
    dialect: Api | None = None,
) -> Target:
    """The same question in Anthropic Messages (``POST /v1/messages``) or OpenAI Chat
    (``POST /v1/chat/completions``). ``dialect`` defaults to what each side is usually
    asked in: Anthropic directly at the simulator, OpenAI through the proxy. An Anthropic
    request is the same bytes wherever it goes (but for ``Host``): the proxy's Messages
    door gets exactly what the simulator gets directly.
    """
    messages = [{"role": "user", "content": text}]
    if dialect is None:
        dialect = "anthropic" if via == "simulator" else "openai"
    if dialect == "anthropic":
        body: dict[str, object] = {"model": MODEL, "max_tokens": max_tokens, "messages": messages}
        headers = [
            ("content-type", "application/json"),
            ("x-api-key", SIM_KEY),
            ("anthropic-version", "2023-06-01"),
        ]
        path = "/v1/messages"
    else:
        body = {"model": MODEL, "max_completion_tokens": max_tokens, "messages": messages}
        headers = [("content-type", "application/json")]
        path = "/v1/chat/completions"
    if stream:
        body["stream"] = True
    return Target.build(via, url, path, headers, body)


Driver = Callable[[Tally], Awaitable[Run]]


@final
@dataclass
class Phase:
    """A measured phase and the raw data behind it (for scenario-specific analysis)."""

    result: PhaseResult
    run: Run
    sim_after: dict[str, Any]
    metrics_before: dict[str, Any] | None
    metrics_after: dict[str, Any] | None


@final
class Bench:
    """Runs scenarios' phases against a ``Stack``, collecting results into a scenario."""

    def __init__(self, options: Options, display: Display) -> None:
        self.options = options
        self.display = display

    async def warmup(self, pool: Pool, target: Target, workers: int, seconds: float) -> None:
        """Open the connections and run a short closed loop nobody counts."""
        await pool.prefill(workers)
        if seconds > 0:
            await closed_loop(pool, target, workers=workers, duration=seconds)

    async def measure_pair(
        self,
        scenario: ScenarioResult,
        stack: Stack,
        *,
        workers: int,
        stream: bool,
        dialect: Api = "openai",
        names: tuple[str, str] = ("direct", "proxy"),
        seconds: float | None = None,
        warmup: float | None = None,
        recent: int = 0,
    ) -> tuple[Phase, Phase]:
        """The same closed-loop load straight to the simulator (Anthropic Messages), then
        through the ``proxy`` proxy in ``dialect``, each after its own warm-up.

        Args:
          names: the two phases' names, direct first.
          recent: simulator traces to keep with each phase (``Phase.sim_after``).
        """
        opts = self.options
        seconds = opts.phase_s if seconds is None else seconds
        warmup = opts.warmup_s if warmup is None else warmup
        direct = target_for("simulator", stack.sim.url, stream=stream)
        proxied = target_for("proxy", stack.proxies["proxy"].url, stream=stream, dialect=dialect)
        phases = []
        for name, target, proxy in ((names[0], direct, None), (names[1], proxied, "proxy")):
            pool = Pool(target.host, target.port)
            try:
                await self.warmup(pool, target, workers, warmup)
                phase = await self.measure(
                    scenario,
                    stack,
                    name,
                    closed_driver(pool, target, workers, seconds),
                    target=target,
                    proxy=proxy,
                    label=f"{name}: {workers} clients, closed loop",
                    seconds=seconds,
                    recent=recent,
                )
            finally:
                await pool.aclose()
            phases.append(phase)
        return phases[0], phases[1]

    async def sim_idle(self, stack: Stack, recent: int = 0) -> dict[str, Any]:
        """The simulator's stats once nothing is in flight there (aborts have landed), with
        its ``recent`` newest traces (fewer if it holds fewer)."""
        # Idle, it holds one trace per request since the reset (up to its capacity). Never
        # ask for more: it slices ``traces[len - recent:]``, and for ``len < recent < 2 len``
        # that negative start returns only the newest ``recent - len`` traces.
        with trio.move_on_after(_IDLE_TIMEOUT_S):
            while True:
                stats = await stack.sim.stats(0)
                if stats["in_flight"] == 0:
                    held = min(recent, int(stats["requests_total"]))
                    return await stack.sim.stats(held) if held > 0 else stats
                await trio.sleep(0.02)
        raise ServerError(f"simulator still busy {_IDLE_TIMEOUT_S:g} s after the load stopped")

    async def measure(
        self,
        scenario: ScenarioResult,
        stack: Stack,
        name: str,
        driver: Driver,
        *,
        target: Target,
        proxy: str | None = None,
        label: str = "",
        seconds: float | None = None,
        recent: int = 0,
        bucket: float = 1.0,
        concurrent: Callable[[], Awaitable[None]] | None = None,
        retries: bool = False,
    ) -> Phase:
        """Run one phase and append its result and reconciliation checks to ``scenario``.

        Args:
          driver: runs the load, counting into the given ``Tally``.
          proxy: name of the stack's proxy the load goes through (None: direct).
          recent: simulator traces to fetch with the final stats.
          concurrent: a task run alongside the driver (e.g. a poller), cancelled when the
            driver returns.
          retries: the proxy may retry upstream calls in this phase, so the simulator is
            reconciled with the proxy's upstream attempts (``upstream_checks``) instead of
            with one call per request.
        """
        server: ProxyServer | None = stack.proxies[proxy] if proxy is not None else None
        if server is not None:
            await server.wait_idle()
        await self.sim_idle(stack)
        await stack.sim.reset()
        sim_before = await stack.sim.stats()
        metrics_before = await server.metrics() if server is not None else None
        pids = {"simulator": stack.sim.pid, "client": os.getpid()}
        if server is not None:
            pids["proxy"] = server.pid
        meter = CpuMeter(pids)
        tally = Tally()
        holder: list[Run] = []

        async def drive(cancel: trio.CancelScope) -> None:
            holder.append(await driver(tally))
            cancel.cancel()

        profile_dir, profile = self.options.profile_dir, None
        async with AsyncExitStack() as exits:
            if profile_dir is not None and server is not None:
                profile = profile_dir / f"{scenario.name}-{name}.folded"
                log = profile_dir / "py-spy.log"
                await exits.enter_async_context(profiled(server.pid, profile, log))
            async with self.display.phase(label or name, seconds, tally):
                meter.start()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(drive, nursery.cancel_scope)
                    if concurrent is not None:
                        nursery.start_soon(concurrent)
                usage = meter.stop()
        extra: dict[str, Any] = {}
        if profile is not None:
            text = await trio.Path(profile).read_text() if await trio.Path(profile).exists() else ""
            extra["profile"] = {"file": str(profile), **summarize_folded(text)}
        run = holder[0]
        metrics_after = await server.wait_idle() if server is not None else None
        sim_after = await self.sim_idle(stack, recent)
        result = phase_result(
            name,
            run,
            via=target.via,
            proxy=proxy,
            stream=target.stream,
            upstream=upstream_delta(sim_before, sim_after),
            cpu=usage,
            bucket=bucket,
            extra=extra,
        )
        scenario.phases.append(result)
        scenario.notes += noise_notes(result)
        counts = result.counts
        if metrics_before is not None and metrics_after is not None:
            scenario.checks += reconcile(
                name, counts, metrics_before, metrics_after, stream=target.stream
            )
            if retries:
                scenario.checks += upstream_checks(
                    name, result.upstream.requests, metrics_before, metrics_after
                )
            else:
                took_on = int(metrics_after["requests"]["total"]) - int(
                    metrics_before["requests"]["total"]
                )
                scenario.checks.append(
                    Check(
                        f"{name}: every request the proxy took on reached the upstream once",
                        result.upstream.requests == took_on,
                        took_on,
                        result.upstream.requests,
                        "proxy requests.total delta (expected) vs simulator requests (actual)",
                    )
                )
        else:
            scenario.checks.append(
                Check(
                    f"{name}: every request sent reached the simulator once",
                    result.upstream.requests == counts.sent,
                    counts.sent,
                    result.upstream.requests,
                    "client requests sent (expected) vs simulator requests (actual)",
                )
            )
        return Phase(result, run, sim_after, metrics_before, metrics_after)


def noise_notes(result: PhaseResult) -> list[str]:
    """Say so when a phase's numbers are about the machine rather than the proxy."""
    notes = []
    cpu = result.cpu
    if cpu.other_util is not None and cpu.other_util > NOISY_OTHER_CORES:
        notes.append(
            f"{result.name}: other processes used {cpu.other_util:.2f} cores during this phase; "
            "its absolute numbers (and the CPU per request) are inflated by contention."
        )
    if cpu.client_util is not None and cpu.client_util > SATURATED_CLIENT_CORES:
        notes.append(
            f"{result.name}: the load generator used {cpu.client_util:.2f} cores; it may be "
            "the bottleneck of this phase."
        )
    return notes


def monotonic_offset() -> float:
    """``time.monotonic() - trio.current_time()``: maps trio times onto the system clock."""
    return time.monotonic() - trio.current_time()


def target_result(
    name: str, target: str, actual: float | None, unit: str, ok: Callable[[float], bool]
) -> TargetResult:
    return TargetResult(
        name=name,
        target=target,
        actual=None if actual is None else round(actual, 3),
        unit=unit,
        met=None if actual is None else ok(actual),
    )
