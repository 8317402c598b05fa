"""What watches a soak while it runs, and waits for the servers to settle after it.

``sample`` reads, once a second, the proxy's RSS (psutil), its ``/metrics`` gauges and
request count, and the simulator's 529 count; ``count`` the clients' counts. Both run until
cancelled, beside the load. ``settled_metrics`` and ``settled_tasks`` wait, after the load,
until the proxy has counted every request and its trio tasks are steady;
``stored_responses`` counts the Responses the proxy has stored in its data directory.
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from typing import Any, Final

import trio

from trio_batcher.store import SQLiteResponseStore

from .load import Tally
from .processes import ProxyServer, SimServer
from .soak_client import FreshPool
from .soak_memory import MemorySample
from .wire import Pool, encode_request, get_json

__all__ = [
    "TRAFFIC_COLUMNS",
    "count",
    "handled",
    "host_port",
    "sample",
    "settled_metrics",
    "settled_tasks",
    "stored_responses",
]

SETTLE_S: Final = 15.0


def host_port(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


def handled(metrics: Mapping[str, Any]) -> int:
    """Requests the proxy counted: taken on (``requests.total``) or shed (``rejected``)."""
    return int(metrics["requests"]["total"]) + int(metrics["rejected"]["total"])


async def sample(
    server: ProxyServer,
    sim: SimServer,
    pool: FreshPool,
    samples: list[MemorySample],
    sim_529: list[tuple[float, int]],
    start: float,
    base: int,
) -> None:
    """Once a second until cancelled: the proxy's RSS and gauges, the simulator's 529s;
    and the load pool's stale idle connections closed."""
    # Any-typed on purpose: psutil (a bench dependency) ships no type stubs.
    psutil: Any = importlib.import_module("psutil")
    process = psutil.Process(server.pid)
    host, port = host_port(server.url)
    sim_host, sim_port = host_port(sim.url)
    metrics_pool, sim_pool = Pool(host, port), Pool(sim_host, sim_port)
    metrics_req = encode_request("GET", host, port, "/metrics", [], b"")
    sim_req = encode_request("GET", sim_host, sim_port, "/_sim/stats?recent=0", [], b"")
    await trio.sleep_until(start)
    next_at = start
    try:
        while True:
            rss = process.memory_info().rss
            snap: Any = await get_json(metrics_pool, metrics_req)
            stats: Any = await get_json(sim_pool, sim_req)
            t = trio.current_time() - start
            gauges = snap["concurrency"]
            samples.append(
                MemorySample(
                    t,
                    rss,
                    handled(snap) - base,
                    gauges.get("trio_tasks"),
                    gauges.get("active"),
                    gauges.get("upstream_in_flight"),
                )
            )
            sim_529.append((t, int(stats["by_status"].get("529", 0))))
            await pool.prune()
            next_at += 1.0
            await trio.sleep_until(next_at)
    finally:
        await metrics_pool.aclose()
        await sim_pool.aclose()


TRAFFIC_COLUMNS: Final = ["t_s", "sent", "ok", "shed", "error", "left", "unsent"]


async def count(tally: Tally, rows: list[list[Any]], start: float) -> None:
    """Once a second until cancelled: the clients' counts so far (``TRAFFIC_COLUMNS``)."""
    next_at = start
    while True:
        await trio.sleep_until(next_at)
        t = round(trio.current_time() - start, 2)
        rows.append([t, tally.sent, tally.ok, tally.shed, tally.error, tally.aborted, tally.unsent])
        next_at += 1.0


async def settled_metrics(server: ProxyServer, expected: int) -> dict[str, Any]:
    """``/metrics`` once the proxy is idle and has counted ``expected`` requests (a client
    that left is counted when the proxy notices), or after ``SETTLE_S`` whatever it says."""
    snapshot = await server.wait_idle()
    with trio.move_on_after(SETTLE_S):
        while handled(snapshot) < expected:
            await trio.sleep(0.1)
            snapshot = await server.wait_idle()
    return snapshot


async def settled_tasks(server: ProxyServer, at_most: int | None = None) -> int | None:
    """The proxy's live trio tasks once steady (the same twice 0.5 s apart), or once at
    most ``at_most``; ``None`` if ``/metrics`` does not say (``concurrency.trio_tasks``)."""
    last: int | None = None
    with trio.move_on_after(SETTLE_S):
        while True:
            await trio.sleep(0.5)
            value = (await server.wait_idle())["concurrency"].get("trio_tasks")
            if value is None or value == last or (at_most is not None and value <= at_most):
                return value if isinstance(value, int) else None
            last = value
    return last


async def stored_responses(server: ProxyServer) -> int:
    """How many responses the proxy's store holds (0 before its first write), read from
    its SQLite file while it runs (WAL: a reader never blocks its writer)."""
    path = SQLiteResponseStore(server.data_dir).path

    def count() -> int:
        if not path.exists():
            return 0
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            (rows,) = db.execute("SELECT count(*) FROM responses").fetchone()
        return int(rows)

    return await trio.to_thread.run_sync(count)
