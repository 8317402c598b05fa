"""The ``peers`` scenario: the same loads direct, through trio-batcher and through LiteLLM.

A user choosing a gateway compares it with the incumbent under the same load, on the same
machine, at the same moment; so does this. Each load runs, one after another against one
upstream -- ``bench.canned_upstream``, which answers for almost no CPU, so that on a small
machine the gateways compete with the load generator only, not with a simulator that
validates every request: straight to it (``direct``), through trio-batcher (one process, and
``serve --workers 2``), through the stack's floor server (``bench.floor``: hypercorn and
httpcore2 doing nothing else; non-streamed loads only) and, given ``--litellm PATH``,
through LiteLLM configured alike (``litellm_peer``). The loads are the ones the
performance issue states: 1 and 50 closed-loop clients of non-streamed requests answered
in 50 ms, then 20 and 100 clients streaming 48 deltas at 100 tokens/s.

Every figure is measured outside the phase machinery (``overhead.metered_loop``): LiteLLM
and a proxy of two workers have no single ``/metrics`` to reconcile with. CPU is each
gateway's own process (and, for workers, its supervisor's descendants) over the measured
seconds; ratios are taken within this one run. The table and the targets are built in
``peers_report``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from statistics import median
from typing import Any, Final, final

from .figures import ms_per
from .harness import PROMPT, Bench, target_for
from .litellm_peer import PeerServer, running_litellm
from .load import Target
from .overhead import metered_loop
from .peers_report import peers_summary, peers_targets
from .processes import Stack, running_stack
from .results import Check, ScenarioResult
from .stats import summary_ms

__all__ = ["LOADS", "Load", "run_peers"]


@final
@dataclass(frozen=True)
class Load:
    name: str
    clients: int
    stream: bool


LOADS: Final = (
    Load("1 client, non-stream", 1, False),
    Load("50 clients, non-stream", 50, False),
    Load("20 streams", 20, True),
    Load("100 streams", 100, True),
)
STREAM_TOKENS: Final = 48
# The upstream of each half (``bench.canned_upstream``): replies in 50 ms; streams of 48
# deltas at 100 tokens/s.
_PLAIN_UPSTREAM: Final = ["--ttft-ms", "50", "--tokens-per-s", "0"]
_STREAM_UPSTREAM: Final = ["--ttft-ms", "50", "--tokens-per-s", "100", "--tokens", "48"]
_WORKERS: Final = 2


@final
@dataclass(frozen=True)
class _Via:
    """One way to the upstream: a base URL, the pid to meter, and how to ask."""

    name: str
    url: str
    pid: int
    tree: bool = False  # meter the pid's descendants too (a supervisor of workers)
    direct: bool = False
    anthropic: bool = False  # asked in Messages (the upstream, the floor) or OpenAI Chat


async def run_peers(bench: Bench, scenario: ScenarioResult) -> None:
    opts = bench.options
    seconds = opts.duration if opts.duration is not None else (3.0 if opts.quick else 10.0)
    warmup = min(opts.warmup_s, 2.0)
    scenario.config = {
        "loads": [vars(load) for load in LOADS],
        "upstream": {"plain": _PLAIN_UPSTREAM, "stream": _STREAM_UPSTREAM},
        "stream_tokens": STREAM_TOKENS,
        "seconds": seconds,
        "warmup_s": warmup,
        "workers": _WORKERS,
        "litellm": str(opts.litellm) if opts.litellm else None,
    }
    if opts.litellm is None:
        scenario.notes.append(
            "LiteLLM not measured: pass --litellm PATH (a LiteLLM proxy executable in a "
            "scratch venv; docs/benchmarks.md says how) to add it to the same run."
        )
    rows: list[dict[str, Any]] = []
    for stream in (False, True):
        loads = [load for load in LOADS if load.stream == stream]
        async with _vias(bench, stream) as vias:
            for load in loads:
                for via in vias:
                    if via.name == "floor" and load.stream:
                        continue  # the floor server relays whole replies only
                    rows.append(await _measure(bench, via, load, seconds, warmup))
    for row in rows:
        scenario.checks.append(
            Check(
                f"{row['load']} via {row['via']}: every request answered",
                row["errors"] == 0,
                0,
                row["errors"],
            )
        )
    scenario.summary = peers_summary(rows, workers=_WORKERS)
    scenario.targets += peers_targets(rows, workers=_WORKERS)


@asynccontextmanager
async def _vias(bench: Bench, stream: bool) -> AsyncIterator[list[_Via]]:
    """One upstream and every way to it: direct, proxy, proxy with workers, floor, LiteLLM."""
    opts = bench.options
    log_dir = opts.log_dir / ("peers-stream" if stream else "peers")
    async with AsyncExitStack() as stack:
        servers: Stack = await stack.enter_async_context(
            running_stack(
                [],
                {"proxy": {}, "workers": {}},
                log_dir,
                floor=not stream,
                workers={"workers": _WORKERS},
                canned=_STREAM_UPSTREAM if stream else _PLAIN_UPSTREAM,
            )
        )
        assert servers.canned is not None
        upstream = servers.canned
        vias = [
            _Via("direct", upstream.url, upstream.pid, direct=True, anthropic=True),
            _Via("trio-batcher", servers.proxies["proxy"].url, servers.proxies["proxy"].pid),
        ]
        proxy2 = servers.proxies["workers"]
        vias.append(_Via(f"trio-batcher ×{_WORKERS} workers", proxy2.url, proxy2.pid, tree=True))
        if servers.floor is not None:
            # The floor relays the direct request as it is: the same bytes as direct.
            vias.append(_Via("floor", servers.floor.url, servers.floor.pid, anthropic=True))
        if opts.litellm is not None:
            bench.display.line("  starting LiteLLM ...")
            peer: PeerServer = await stack.enter_async_context(
                running_litellm(opts.litellm, upstream.url, log_dir)
            )
            vias.append(_Via("LiteLLM", peer.url, peer.pid))
        yield vias


def _target(via: _Via, load: Load) -> Target:
    text = f"{PROMPT} [[sim:tokens={STREAM_TOKENS}]]" if load.stream else PROMPT
    if via.anthropic:
        return target_for("simulator", via.url, stream=load.stream, text=text)
    return target_for("proxy", via.url, stream=load.stream, text=text, dialect="openai")


async def _measure(
    bench: Bench, via: _Via, load: Load, seconds: float, warmup: float
) -> dict[str, Any]:
    bench.display.line(f"  {load.name} via {via.name}: ~{seconds:g} s ...")
    run, used = await metered_loop(
        _target(via, load),
        {"gateway": via.pid},
        workers=load.clients,
        seconds=seconds,
        warmup=warmup,
        trees=("gateway",) if via.tree else (),
    )
    ok = [o for o in run.outcomes if o.kind == "ok"]
    latency = summary_ms(o.latency for o in ok)
    row: dict[str, Any] = {
        "load": load.name,
        "clients": load.clients,
        "stream": load.stream,
        "via": via.name,
        "direct": via.direct,
        "requests": len(ok),
        "errors": len(run.outcomes) - len(ok),
        "per_s": round(len(ok) / run.wall, 1) if run.wall > 0 else None,
        "p50_ms": latency.p50,
        "p99_ms": latency.p99,
        # The upstream's own CPU when direct: what it costs, for scale.
        "cpu_ms_per_request": ms_per(used["gateway"], len(ok)),
    }
    if load.stream:
        row["ttft_p50_ms"] = summary_ms(t for o in ok if (t := o.ttft) is not None).p50
        row["events_per_stream"] = median(len(o.event_times) for o in ok) if ok else None
    bench.display.line(
        f"  {load.name} via {via.name}: {len(ok)} ok, {row['errors']} errors, "
        f"{row['per_s']}/s, p50 {latency.p50} ms, {row['cpu_ms_per_request']} ms CPU each"
    )
    return row
