"""The scenarios ``trio-batcher bench`` can run: their names, titles, and what each does.

Each scenario is a module of its own (``overhead``, ``streaming``, ``burst``,
``overload``, ``disconnect``, ``peers``, ``ratelimit``, ``failover``, ``cluster``, ``tenants``, ``mixed``, ``batch-memory``,
``soak``). Each
starts its own simulator and proxies (``processes.running_stack``), so one scenario's settings and
counters never leak into another, and runs its phases through ``Bench.measure`` (the
``cluster`` and ``soak`` scenarios measure their own, across processes). What is compared is always
compared within one scenario, one run, on the same machine at the same moment: the proxy
against the simulator directly, batching on against off. Absolute numbers on a shared
2-core machine move from run to run; the ratios and differences are what the targets are
about.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, final

from .batch_memory import run_batch_memory
from .burst import run_burst
from .cluster import run_cluster
from .disconnect import run_disconnect
from .failover import run_failover
from .harness import Bench
from .mixed import run_mixed
from .overhead import run_overhead
from .overload import run_overload
from .peers import run_peers
from .ratelimit import run_ratelimit
from .results import ScenarioResult
from .soak import run_soak
from .streaming import run_stream
from .streams_at_scale import run_streams_at_scale
from .tenants import run_tenants

__all__ = ["SCENARIOS", "Scenario"]


@final
@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    description: str
    run: Callable[[Bench, ScenarioResult], Awaitable[None]]
    in_all: bool = True  # run by ``--scenario all`` (the soak is not: it takes minutes)


SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        Scenario(
            "overhead",
            "Proxy overhead: the same closed-loop load direct and through the proxy",
            "N clients send back-to-back non-streaming requests for the same duration, first "
            "straight to the simulator (answering in 50 ms), then through the proxy (batching "
            "and the gate off), then through the floor server and through the proxy as "
            "serve --workers 2. Throughput ratio, added p50 and the proxy's CPU per request, "
            "for 1 and 2 workers; then the same pair with 5 clients, a load nothing saturates.",
            run_overhead,
        ),
        Scenario(
            "peers",
            "Peers: the same loads direct, through trio-batcher and through LiteLLM",
            "One run, one canned upstream that costs almost no CPU (bench.canned_upstream): "
            "1 and 50 closed-loop clients of non-streamed requests (answered in 50 ms), then "
            "20 and 100 clients streaming 48 deltas at 100 tokens/s, each load straight to "
            "the upstream, through trio-batcher (one "
            "process, then serve --workers 2), through the stack's floor server (non-stream "
            "only) and, given --litellm PATH, through LiteLLM configured alike. Side by "
            "side: throughput as a share of direct, p50 added, each gateway's CPU per "
            "request and its ratio to trio-batcher's.",
            run_peers,
            in_all=False,
        ),
        Scenario(
            "stream",
            "Streaming: TTFT and inter-token latency, direct and through the proxy",
            "N clients stream 24-token replies (first token at 50 ms, then 100 tokens/s), "
            "first straight from the simulator, then through the proxy: in OpenAI Chat "
            "(direct, proxy), then as the same Anthropic Messages request through the "
            "proxy's /v1/messages, which relays every event unchanged (anthropic-direct, "
            "anthropic-proxy). TTFT is measured from the send to the first content event; "
            "inter-token latency between content events; the relay's cost per SSE event "
            "is proxy minus direct. Then both pairs with 5 clients, a load nothing saturates.",
            run_stream,
        ),
        Scenario(
            "burst",
            "Burst: 200 clients inside 50 ms, admission windows on vs off",
            "200 requests arrive within 50 ms (the simulator answers in 100 ms). Through the "
            "batching proxy (windows of 16 / 10 ms, 16 upstream calls at once) the upstream "
            "sees a shaped wave; through the plain proxy, a spike. The simulator is polled "
            "every 5 ms and the proxy's /metrics every 10 ms; exact upstream call intervals "
            "come from the simulator's traces. Then one client alone measures what a window "
            "costs a lone request.",
            run_burst,
        ),
        Scenario(
            "overload",
            "Overload: open-loop arrivals up to 2x capacity with the admission gate on",
            "The proxy admits 8 requests at once and queues 8 (MAX_INFLIGHT=8, MAX_QUEUE=8); "
            "the simulator answers in 100 ms, so capacity is 80 requests/s. Arrivals come at a "
            "fixed rate in steps of the capacity, latency measured from each intended send "
            "time. Goodput should plateau, the excess be shed with 429, admitted p99 bounded.",
            run_overload,
        ),
        Scenario(
            "disconnect",
            "Disconnect: clients that leave mid-call and mid-stream",
            "Clients leave on purpose -- during a 2 s non-streaming call, or a few tokens into "
            "a 300-token stream -- directly at the simulator and through the proxy. The "
            "simulator must see every abort (its abandoned count), and the tokens spent on "
            "abandoned work stay what the client consumed, not what a full reply would cost.",
            run_disconnect,
        ),
        Scenario(
            "ratelimit",
            "Rate limit: coordinated backoff on vs off against an enforced upstream limit",
            "The simulator enforces 50 requests per second (a token bucket of 50 refilling "
            "in 1 s; beyond it 429 with a whole-second retry-after) and answers in 50 ms. 10 "
            "closed-loop clients (--concurrency), able to send 200 requests/s, go through a "
            "proxy with coordinated backoff on, then through one with it off (each request "
            "honours only its own retry-after); both retry up to twice within the default "
            "retry budget. "
            "Reported per variant: goodput, client errors, p50/p99 of successes, the "
            "upstream's 429s, retry amplification (simulator requests per client request) "
            "and the proxy's retries and cooldowns.",
            run_ratelimit,
        ),
        Scenario(
            "failover",
            "Failover: one of two upstreams goes from healthy to a 529 storm and back",
            "Two simulators (100 ms replies) are the two upstreams of one gateway "
            "(UPSTREAMS_FILE, weight 1 each). 16 clients (--concurrency) hold conversations of "
            "4 turns over /v1/messages, each with a ~2,000-token system prompt of its own "
            "marked cache_control, a new conversation when one ends. For the middle third of "
            "the run (24 s; --quick 6; --duration S) upstream 0 answers every request 529 "
            "(POST /_sim/overload), then is healthy again (DELETE). The storm's 529s carry "
            "retry-after in one pair of runs and none (as Anthropic's usually) in the other "
            "(--storm-retry-after yes|no|both); each pair on fresh stacks: cache affinity on, "
            "then UPSTREAM_AFFINITY=0. Side by side: client errors, p50/p95 per third and what "
            "the storm added, the cache-read ratio of the replies, the 529s upstream 0 "
            "answered and when, the gateway's failovers, spills and affinity kept/moved.",
            run_failover,
        ),
        Scenario(
            "cluster",
            "Cluster: one upstream cap, one proxy against two sharing it through Redis",
            "The simulator answers in 40 ms and the cap is 8 calls, so the upstream can take "
            "200 requests/s: the cap binds. The same closed-loop load (10,000 requests from "
            "300 clients; --quick 1,500 from 100) goes through one proxy with "
            "BATCH_MAX_CONCURRENCY=8 and no Redis, then through two proxy processes with the "
            "same cap and REDIS_URL pointing at one redis-server the bench starts "
            "(REDIS_LEASE_TTL_S=3), half the clients on each; then the same pair with a cap "
            "of 1024 that does not bind (5,000 requests; --quick 1,500). Every upstream "
            "call's trace is audited against the cap (no call may start with the cap already "
            "in flight); after each Redis phase the lease blocks must drain from Redis once "
            "the proxies are idle (no ghost lease) and no instance may have lost a lease. "
            "Reported side by side: throughput, the upstream's peak and mean in flight, "
            "client errors, the proxies' CPU per request (the ratio is issue 30's <= 1.3x), "
            "redis-server's, Redis commands and lease syncs, and each instance's /metrics "
            "cluster block. Skipped without redis-server.",
            run_cluster,
        ),
        Scenario(
            "tenants",
            "Tenants: one floods, one trickles, then weights 3:1 share the slots",
            "A gate of 8 slots (MAX_INFLIGHT=8, MAX_QUEUE=160; the simulator answers in "
            "100 ms ± 20%, so capacity is 80 requests/s) in front of two tenants of a "
            "TENANTS_FILE. Tenant B alone sends 20 requests at 20/s (its unloaded latency); "
            "then tenant A sends 300 at once and, 0.6 s later, B the same 20 at 20/s: B's "
            "p50 should stay within 2x its unloaded p50 and B never be shed, while A absorbs "
            "the queueing and the shedding (429 queue_full). Then, with A at weight 3, 16 "
            "closed-loop clients per tenant keep both queues full for the phase: the "
            "requests each tenant completed while saturated should be 3:1 within 10%. "
            "--quick: A 200, B 10, a 3 s weighted phase.",
            run_tenants,
        ),
        Scenario(
            "mixed",
            "Mixed: interactive clients while background and flex work queues, lanes on vs off",
            "A gate of 8 slots (MAX_INFLIGHT=8; the simulator answers in 100 ms ± 20%, so "
            "capacity is 80 requests/s; MAX_QUEUE and ACQUIRE_TIMEOUT_S large enough that "
            "nothing is shed). 4 closed-loop interactive clients (OpenAI Chat) alone: their "
            "unloaded p50 and p99. Then the same clients while deferrable load arrives: "
            "Responses API requests with background: true at 50/s (more than the capacity the "
            "interactive clients leave, so the deferrable queue grows) and Chat requests with "
            "service_tier: flex at 5/s; through a proxy with LANES_ENABLED=1, then through one "
            "with LANES_ENABLED=0. After each phase every accepted background response is "
            "polled until finished (none may starve). Side by side: the interactive p50/p99 "
            "alone, with lanes and without; background accepted and completed; flex answers "
            "and the cost saved (the /metrics flex block); each lane's admissions and queue "
            "wait. What the gateway does with background and flex is reported as it is.",
            run_mixed,
        ),
        Scenario(
            "streams-at-scale",
            "Many open streams: 1,000 sparse streams at once, direct and through the proxy",
            "1,000 streams (--quick 200; --concurrency N) open within 2 s and stay open for "
            "60 s (--quick 15; --duration S), each carrying 2 content events a second, as "
            "agents' and IDEs' long sparse streams do: straight from the simulator, then "
            "through a proxy's OpenAI Chat door, then through another proxy's /v1/messages "
            "(default settings, each its own process). Errors (a non-200, a stream cut "
            "short or without [DONE] / message_stop), the inter-event gap's p50 and p99 and "
            "what the proxy adds to the p99, the proxy's RSS per open stream (its median "
            "while all streams are open minus its idle RSS, over the streams) and its CPU "
            "per upstream event. Not part of all.",
            run_streams_at_scale,
            in_all=False,
        ),
        Scenario(
            "batch-memory",
            "Batch API memory: 10,000 lines and 100,000 lines, peak RSS of the proxy",
            "Two proxies, each its own process, each run one Batch API file through the "
            "simulator's Message Batches (processed at once): 10,000 lines on one, 100,000 "
            "on the other. Each proxy's RSS is sampled every 20 ms through the upload, the "
            "validation and sending, the upstream's processing, the delivery in input "
            "order and the download of the output; the larger file's peak above its idle "
            "baseline must stay within 16 MB of the smaller one's.",
            run_batch_memory,
            in_all=False,
        ),
        Scenario(
            "soak",
            "Soak: minutes of mixed traffic under faults, with memory watched",
            "An open loop of 200 requests/s over every door (OpenAI Chat and OpenAI "
            "Responses with and without streaming and tools, a fifth of the Responses "
            "stored; Anthropic Messages with and without streaming) through a "
            "proxy with batching and the gate on, with bursts of 250 inside 100 ms every "
            "15 s; clients that leave before their body is sent (closing or resetting the "
            "connection), while queued or in flight, and mid-stream; and a simulator "
            "injecting 500s, hangs, stalls, slow drips, mid-stream errors and cuts, a 429 "
            "and a 529 with retry-after on a schedule, and 529 overload windows. Every "
            "request is accounted for once and reconciled with /metrics and the simulator; "
            "the upstream cap, idle gauges, trio tasks and 5xx are checked; the proxy's RSS "
            "is sampled every second and its slope fitted in bytes per request. "
            "--minutes N (default 10, --quick 2); not part of all.",
            run_soak,
            in_all=False,
        ),
    )
}
