"""The ``disconnect`` scenario: clients that leave mid-call and mid-stream.

Clients leave on purpose -- during a 2 s non-streaming call, or a few tokens into a
300-token stream -- directly at the simulator and through the proxy. The simulator must see
every abort (its ``abandoned`` count), no abandoned call may run to completion upstream,
and the tokens spent on abandoned work are estimated from the simulator's latency schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .figures import delta as _delta
from .figures import round3 as _round
from .harness import Bench, Phase, target_for
from .load import Abort, Run, Tally, Target, open_loop
from .processes import running_stack
from .results import Check, ScenarioResult
from .wire import Pool

__all__ = ["run_disconnect"]


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


async def run_disconnect(bench: Bench, scenario: ScenarioResult) -> None:
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
