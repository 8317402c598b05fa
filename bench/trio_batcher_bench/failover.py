"""The ``failover`` scenario: one of two upstreams goes from healthy to a 529 storm and back.

Theory of operation
-------------------
Two simulators (each its own process, state and prompt cache) are the two upstreams of
one gateway, named in an ``UPSTREAMS_FILE`` (kind ``anthropic``, weight 1 each). Clients
hold multi-turn conversations over the gateway's native ``/v1/messages``: ``CLIENTS``
workers, each running conversations of ``TURNS`` turns one after the other (a finished
conversation is replaced by a new one), every turn appending the reply and a new user
message to the history. Each conversation has a long system prompt of its own marked
``cache_control: {"type": "ephemeral"}``: its first turn on an upstream writes the
simulator's cache entry, every later turn on *that* upstream reads it. So the cache-read
ratio measures what cache affinity is for: with affinity a conversation pays one cache
write (two if a failover moves it); without it, turns are spread by weight and a
conversation pays a write on each upstream it touches.

The run has three thirds: healthy, then ``POST /_sim/overload`` (529) on upstream 0, then
``DELETE /_sim/overload`` (healthy again). The gateway must fail over before the first
byte, so the clients should see no error; what the storm costs them is latency (a 529
round trip and whatever the gateway waits before moving on), reported per third by each
request's send time.

The storm comes two ways (``STORMS``). With ``retry-after`` (the simulator's default: the
rest of the window) the gateway puts upstream 0 in cooldown at the first 529 and sends it
nothing more. Without (``"retry_after": false``), as Anthropic's own 529s usually arrive, it
has only upstream 0's *health* to go by (``trio_batcher/upstreams/steward.py``: unhealthy
for 1 s after a failure, doubling per failure in a row): it tries upstream 0 again each
time that lapses, so the 529s upstream 0 answers should come at gaps of about 1, 2, 4 s...
-- their times (``storm_529_at_s``, from the simulator's traces) show it.

Each storm is run twice, each on a fresh stack (fresh simulators: empty caches):
affinity on (the default) and ``UPSTREAM_AFFINITY=0``. The per-turn numbers come from the
clients (status, latency, the reply's ``usage``); the gateway's ``/metrics`` adds its
``routing`` block (failovers, spills, affinity kept/moved) and ``by_upstream``; the
simulators' ``/_sim/stats`` say how many 529s the storm actually answered.

Not ``Bench.measure``: that measures against one simulator. Nothing here is a timed
assertion; the checks are about correctness (no client error, every request counted by the
gateway, the storm happened) and the one comparison the scenario exists for (affinity keeps
more cache reads).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, final

import httpx2
import trio

from .harness import MODEL, Bench
from .load import Outcome, Tally
from .processes import (
    SIM_KEY,
    _all_ready,
    _base_env,
    _Child,
    _spawn,
    _stop,
    free_port,
)
from .results import Check, ScenarioResult
from .stats import summary_ms

__all__ = [
    "STORMS",
    "VARIANTS",
    "Turn",
    "run_failover",
    "run_names",
    "side_by_side",
    "storm_529_times",
    "variant_summary",
]

CLIENTS: Final = 16
TURNS: Final = 4
REPLY_MS: Final = 100
SYSTEM_CHARS: Final = 8000  # ~2,000 tokens by the simulator's length / 4
KEY_ENV: Final = "BENCH_SIM_ANTHROPIC_API_KEY"
FULL_S: Final = 24.0
QUICK_S: Final = 6.0
UPSTREAM_NAMES: Final = ("sim-a", "sim-b")  # the storm hits the first

Third = Literal["healthy", "storm", "recovered"]
THIRDS: Final[tuple[Third, ...]] = ("healthy", "storm", "recovered")

VARIANTS: Final[Mapping[str, Mapping[str, str]]] = {
    "affinity-on": {"UPSTREAM_AFFINITY": "1"},
    "affinity-off": {"UPSTREAM_AFFINITY": "0"},
}
# The storm's 529s with ``retry-after`` (the simulator's default) or without (Anthropic's
# usual): ``POST /_sim/overload``'s ``retry_after``.
STORMS: Final[Mapping[str, bool]] = {"retry-after": True, "no-retry-after": False}
# ``--storm-retry-after``: which storms to run.
STORM_CHOICES: Final[Mapping[str, tuple[str, ...]]] = {
    "yes": ("retry-after",),
    "no": ("no-retry-after",),
    "both": ("retry-after", "no-retry-after"),
}


def run_names(storm_retry_after: str = "both") -> list[tuple[str, str, str]]:
    """``(run name, storm, affinity variant)`` of every run, in the order they are made:
    each storm with affinity on, then off."""
    return [
        (f"{storm}/{variant}", storm, variant)
        for storm in STORM_CHOICES[storm_retry_after]
        for variant in VARIANTS
    ]


@final
@dataclass(frozen=True, slots=True)
class Turn:
    """One request as its client saw it: when it was sent (seconds after the run started),
    how long it took, its status, and the input side of the reply's ``usage``."""

    conversation: int
    turn: int
    sent_s: float
    latency_s: float
    status: int
    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0


def third_of(sent_s: float, seconds: float) -> Third:
    """Which third of the run a request was sent in."""
    index = min(2, max(0, int(sent_s * 3 // seconds)))
    return THIRDS[index]


def cache_read_ratio(turns: Sequence[Turn]) -> float | None:
    """cache reads / (input + cache reads + cache writes), over ``turns``' replies."""
    read = sum(t.cache_read for t in turns)
    total = read + sum(t.input_tokens + t.cache_write for t in turns)
    return None if total == 0 else round(read / total, 4)


def _system_prompt(conversation: int) -> str:
    head = f"Conversation {conversation}: you are the assistant of project P{conversation}. "
    filler = "Project notes follow; read them before answering every question. "
    return (head + filler * (SYSTEM_CHARS // len(filler) + 1))[:SYSTEM_CHARS]


def _body(conversation: int, history: list[dict[str, Any]]) -> dict[str, Any]:
    system = [
        {
            "type": "text",
            "text": _system_prompt(conversation),
            "cache_control": {"type": "ephemeral"},
        }
    ]
    return {"model": MODEL, "max_tokens": 32, "system": system, "messages": history}


def _reply_text(reply: Mapping[str, Any]) -> str:
    blocks = reply.get("content") or []
    return "".join(b.get("text", "") for b in blocks if isinstance(b, dict)) or "ok"


async def _converse(
    http: httpx2.AsyncClient,
    url: str,
    ids: itertools.count[int],
    started: float,
    seconds: float,
    turns: list[Turn],
    tally: Tally,
) -> None:
    """Conversations of ``TURNS`` turns back to back until ``seconds`` have passed."""
    headers = {"x-api-key": SIM_KEY, "anthropic-version": "2023-06-01"}
    while trio.current_time() - started < seconds:
        conversation = next(ids)
        history: list[dict[str, Any]] = []
        for index in range(TURNS):
            if trio.current_time() - started >= seconds:
                return
            history.append({"role": "user", "content": f"Question {index} of {conversation}?"})
            sent = trio.current_time()
            reply: dict[str, Any] = {}
            tally.sent += 1
            tally.in_flight += 1
            try:
                response = await http.post(url, json=_body(conversation, history), headers=headers)
            except httpx2.TransportError:
                status = 0
            else:
                status = response.status_code
                if status == 200:
                    reply = response.json()
            finally:
                tally.in_flight -= 1
            done = trio.current_time()
            usage = reply.get("usage") or {}
            turns.append(
                Turn(
                    conversation,
                    index,
                    round(sent - started, 4),
                    done - sent,
                    status,
                    int(usage.get("input_tokens") or 0),
                    int(usage.get("cache_read_input_tokens") or 0),
                    int(usage.get("cache_creation_input_tokens") or 0),
                )
            )
            tally.count(Outcome(sent, sent, done, status, "ok" if status == 200 else "error"))
            if status != 200:
                break  # a client that got an error starts over with a new conversation
            history.append({"role": "assistant", "content": _reply_text(reply)})


@final
@dataclass
class FleetStack:
    """Two simulators and one gateway routing across them."""

    sims: list[_Child]
    proxy: _Child
    http: httpx2.AsyncClient
    env: dict[str, str] = field(default_factory=dict)

    async def json(self, method: str, url: str, body: object = None) -> dict[str, Any]:
        response = await self.http.request(method, url, json=body)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data


def upstreams_toml(sim_urls: Sequence[str]) -> str:
    """The ``[[upstream]]`` tables naming the simulators, weight 1 each."""
    tables = [
        f'[[upstream]]\nname = "{name}"\nkind = "anthropic"\nbase_url = "{url}"\n'
        f'api_key_env = "{KEY_ENV}"\nweight = 1\n'
        for name, url in zip(UPSTREAM_NAMES, sim_urls, strict=True)
    ]
    return "\n".join(tables)


@asynccontextmanager
async def fleet_stack(settings: Mapping[str, str], log_dir: Path) -> AsyncIterator[FleetStack]:
    """Start the two simulators and a gateway with ``settings``; stop them all on exit
    (gateway first, so none of its calls is cut by a vanishing upstream)."""
    await trio.Path(log_dir).mkdir(parents=True, exist_ok=True)
    base = _base_env()
    children: list[_Child] = []
    http = httpx2.AsyncClient(trust_env=False, timeout=30.0)
    with tempfile.TemporaryDirectory(prefix="trio-batcher-bench-failover-") as tmp:
        try:
            sims = []
            for name in UPSTREAM_NAMES:
                port = free_port()
                argv = ["simulate", "--port", str(port), "--log-level", "warning"]
                argv += ["--ttft-ms", str(REPLY_MS), "--tokens-per-s", "0", "--jitter", "0"]
                sims.append(await _spawn(name, argv, base, log_dir, port, children))
            upstreams = Path(tmp) / "upstreams.toml"
            upstreams.write_text(upstreams_toml([s.url for s in sims]))
            port = free_port()
            env = {
                **base,
                "UPSTREAMS_FILE": str(upstreams),
                KEY_ENV: SIM_KEY,
                "METRICS_ENABLED": "1",
                "METRICS_LATENCY_WINDOW": "100000",
                "SHUTDOWN_GRACE_S": "2",
                "DATA_DIR": str(Path(tmp) / "data"),
                **settings,
            }
            argv = ["serve", "--port", str(port), "--log-level", "warning"]
            proxy = await _spawn("proxy-failover", argv, env, log_dir, port, children)
            waits = [(s, "/_sim/stats?recent=0") for s in sims] + [(proxy, "/health")]
            await _all_ready(waits, http)
            yield FleetStack(sims, proxy, http, dict(settings))
        finally:
            with trio.CancelScope(shield=True):
                await http.aclose()
                for child in reversed(children):
                    await _stop(child)


def storm_529_times(traces: Sequence[Mapping[str, Any]]) -> list[float]:
    """When upstream 0 answered the storm's 529s: seconds after the first of them (the
    simulator's clock, its traces' ``started_at``), in order."""
    times = sorted(
        float(t["started_at"])
        for t in traces
        if t.get("status") == 529 and t.get("fault") == "overload"
    )
    return [round(t - times[0], 3) for t in times] if times else []


async def run_variant(
    stack: FleetStack,
    seconds: float,
    tally: Tally,
    clients: int = CLIENTS,
    *,
    retry_after: bool = True,
) -> tuple[list[Turn], dict[str, Any], list[dict[str, Any]], list[float]]:
    """The load for ``seconds``, upstream 0 overloaded (529, with ``retry-after`` or
    without) for the middle third.

    Returns the turns, the gateway's ``/metrics`` after, the simulators' stats and when
    upstream 0 answered its 529s (``storm_529_times``)."""
    turns: list[Turn] = []
    ids = itertools.count()
    url = f"{stack.proxy.url}/v1/messages"
    storm_url = f"{stack.sims[0].url}/_sim/overload"
    started = trio.current_time()
    storm_traces: list[dict[str, Any]] = []

    async def storm() -> None:
        await trio.sleep_until(started + seconds / 3)
        # ``for_s`` is the storm's length: with ``retry-after`` the simulator's 529s say the
        # rest of the window, which the gateway takes as upstream 0's cooldown. A longer
        # ``for_s`` ended early by the DELETE would keep upstream 0 cooling down after it.
        body = {"for_s": seconds / 3, "status": 529, "retry_after": retry_after}
        await stack.json("POST", storm_url, body)
        await trio.sleep_until(started + 2 * seconds / 3)
        # The storm's traces before the healthy requests push them out (it keeps 1000).
        stats = await stack.json("GET", f"{stack.sims[0].url}/_sim/stats")
        storm_traces.extend(stats["recent"])
        await stack.json("DELETE", storm_url)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(storm)
        for _ in range(clients):
            nursery.start_soon(_converse, stack.http, url, ids, started, seconds, turns, tally)
    metrics = await stack.json("GET", f"{stack.proxy.url}/metrics")
    sims = [await stack.json("GET", f"{s.url}/_sim/stats?recent=0") for s in stack.sims]
    return turns, metrics, sims, storm_529_times(storm_traces)


def _latency(turns: Sequence[Turn]) -> dict[str, float | None]:
    summary = summary_ms(t.latency_s for t in turns if t.status == 200)
    return {"p50_ms": summary.p50, "p95_ms": summary.p95, "p99_ms": summary.p99}


def variant_summary(
    turns: Sequence[Turn],
    metrics: Mapping[str, Any],
    sims: Sequence[Mapping[str, Any]],
    seconds: float,
    storm_529_at_s: Sequence[float] = (),
) -> dict[str, Any]:
    """One run's numbers: client errors, latency overall and per third (and what the storm
    added to the healthy third's), cache reads, the gateway's routing counters, and when
    upstream 0 answered the storm's 529s."""
    errors = [t for t in turns if t.status != 200]
    by_third = {name: [t for t in turns if third_of(t.sent_s, seconds) == name] for name in THIRDS}
    latency = {name: _latency(group) for name, group in by_third.items()}
    healthy, during = latency["healthy"], latency["storm"]

    def added(key: str) -> float | None:
        a, b = during[key], healthy[key]
        return None if a is None or b is None else round(a - b, 1)

    routing = metrics.get("routing") or {}
    affinity = routing.get("affinity") or {}
    by_upstream = metrics.get("by_upstream") or {}
    return {
        "client_requests": len(turns),
        "conversations": len({t.conversation for t in turns}),
        "client_errors": len(errors),
        "client_error_rate": round(len(errors) / len(turns), 4) if turns else None,
        "client_errors_by_status": {
            str(s): sum(1 for t in errors if t.status == s)
            for s in sorted({t.status for t in errors})
        },
        "latency": {"all": _latency(turns), **latency},
        "storm_added_p50_ms": added("p50_ms"),
        "storm_added_p95_ms": added("p95_ms"),
        "cache_read_ratio": cache_read_ratio(turns),
        "cache_read_ratio_by_third": {n: cache_read_ratio(g) for n, g in by_third.items()},
        "gateway_requests": int(metrics["requests"]["total"]),
        "failovers_by_cause": routing.get("failovers_by_cause", {}),
        "spills_by_cause": routing.get("spills_by_cause", {}),
        "affinity": affinity,
        "by_upstream": {
            name: {
                "requests": row.get("requests"),
                "errors": row.get("errors"),
                "cache_read_ratio": row.get("cache_read_ratio"),
                "attempts_by_outcome": row.get("attempts_by_outcome"),
            }
            for name, row in by_upstream.items()
        },
        "storm_529s": int(sims[0]["by_status"].get("529", 0)),
        "storm_529_at_s": list(storm_529_at_s),
        "upstream_requests": [int(s["requests_total"]) for s in sims],
    }


_TABLE_ROWS: Final = (
    ("client requests", lambda s: s["client_requests"]),
    ("client errors (rate)", lambda s: f"{s['client_errors']} ({s['client_error_rate']})"),
    ("p50 / p95 all (ms)", lambda s: _pair(s["latency"]["all"])),
    ("p50 / p95 healthy third (ms)", lambda s: _pair(s["latency"]["healthy"])),
    ("p50 / p95 storm third (ms)", lambda s: _pair(s["latency"]["storm"])),
    ("p50 / p95 recovered third (ms)", lambda s: _pair(s["latency"]["recovered"])),
    (
        "added by the storm p50 / p95 (ms)",
        lambda s: f"{s['storm_added_p50_ms']} / {s['storm_added_p95_ms']}",
    ),
    ("cache-read ratio", lambda s: s["cache_read_ratio"]),
    ("cache-read ratio by third", lambda s: s["cache_read_ratio_by_third"]),
    ("storm 529s answered by upstream 0", lambda s: s["storm_529s"]),
    ("storm 529s at (s after the first)", lambda s: _times(s["storm_529_at_s"])),
    ("failovers by cause", lambda s: s["failovers_by_cause"]),
    ("spills by cause", lambda s: s["spills_by_cause"]),
    ("affinity kept ratio", lambda s: s["affinity"].get("kept_ratio")),
    ("affinity kept / moved", lambda s: _kept_moved(s["affinity"])),
)


def _pair(latency: Mapping[str, float | None]) -> str:
    return f"{latency['p50_ms']} / {latency['p95_ms']}"


def _kept_moved(affinity: Mapping[str, Any]) -> str:
    return f"{affinity.get('kept', '–')} / {affinity.get('moved', '–')}"


def _times(times: Sequence[float]) -> str:
    """The 529s' times, at most a dozen shown (a storm without back-off has hundreds)."""
    shown = ", ".join(f"{t:g}" for t in times[:12])
    return shown + (f", … ({len(times)})" if len(times) > 12 else "")


def side_by_side(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every run as one table, a column each (``{"columns", "rows"}``, as the report
    renders it)."""
    return {
        "columns": ["", *runs],
        "rows": [[label, *(row(run) for run in runs.values())] for label, row in _TABLE_ROWS],
    }


def _checks(name: str, summary: Mapping[str, Any]) -> list[Check]:
    return [
        Check(
            f"{name}: no client error through the storm",
            summary["client_errors"] == 0,
            0,
            summary["client_errors"],
            "non-200 answers the clients got (failover happens before the first byte)",
        ),
        Check(
            f"{name}: the gateway counted every client request",
            summary["gateway_requests"] == summary["client_requests"],
            summary["client_requests"],
            summary["gateway_requests"],
            "client requests (expected) vs /metrics requests.total (actual)",
        ),
        Check(
            f"{name}: the storm reached upstream 0",
            summary["storm_529s"] > 0,
            "> 0",
            summary["storm_529s"],
            "529s answered by upstream 0's simulator",
        ),
    ]


async def run_failover(bench: Bench, scenario: ScenarioResult) -> None:
    opts = bench.options
    seconds = opts.duration if opts.duration is not None else (QUICK_S if opts.quick else FULL_S)
    clients = opts.concurrency or CLIENTS
    summaries: dict[str, dict[str, Any]] = {}
    for name, storm, variant in run_names(opts.storm_retry_after):
        settings = VARIANTS[variant]
        log_dir = opts.log_dir / "failover" / storm / variant
        async with fleet_stack(settings, log_dir) as stack:
            tally = Tally()
            label = f"{name}: {clients} conversations of {TURNS} turns, 529 storm mid-run"
            async with bench.display.phase(label, seconds, tally):
                turns, metrics, sims, times = await run_variant(
                    stack, seconds, tally, clients, retry_after=STORMS[storm]
                )
        summary = variant_summary(turns, metrics, sims, seconds, times)
        summary["settings"] = dict(settings)
        summary["storm_retry_after"] = STORMS[storm]
        summaries[name] = summary
        scenario.checks += _checks(name, summary)
    for storm in STORM_CHOICES[opts.storm_retry_after]:
        on, off = summaries[f"{storm}/affinity-on"], summaries[f"{storm}/affinity-off"]
        scenario.checks.append(
            Check(
                f"{storm}: affinity keeps more cache reads than routing every request by weight",
                (on["cache_read_ratio"] or 0) > (off["cache_read_ratio"] or 0),
                f"> {off['cache_read_ratio']} (OFF)",
                on["cache_read_ratio"],
                "cache_read / (input + cache_read + cache_write) over every reply",
            )
        )
    scenario.summary = {
        "seconds": seconds,
        "clients": clients,
        "turns_per_conversation": TURNS,
        "storm": "529 on upstream 0 from 1/3 to 2/3 of the run",
        "storms": {storm: STORMS[storm] for storm in STORM_CHOICES[opts.storm_retry_after]},
        "side_by_side": side_by_side(summaries),
        "variants": summaries,
    }
