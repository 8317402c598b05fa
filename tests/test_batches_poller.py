"""The batch poller's rounds: batches stepped side by side, bounded, each by one stepper.

A delivery is held open deterministically by a Message Batches client whose results
stream stops after a number of lines until the test lets it go; everything else is real:
loopback HTTP against the simulator, SQLite in ``tmp_path``, the poller's own ``run``
loop. Two ``BatchPoller`` objects over one directory, each with its own stores and
client, stand for two processes of one deployment (``flock`` claims exclude each other
between two open files of one process as between two processes).
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from batch_support import FINAL, MODEL, line
from support import SIM_KEY, running_simulator

from trio_batcher.edge.openai_batches import new_batch
from trio_batcher.errors import ProxyError
from trio_batcher.offline import BatchPoller
from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.store import SQLiteBatchStore, SQLiteFileStore
from trio_batcher.store.files import BATCH_INPUT
from trio_batcher.translation.openai_chat import TranslationOptions
from trio_batcher.upstream.batches import MessageBatchesClient
from trio_batcher.upstream.pool import UpstreamPool


class CallLog:
    """Which process is in an upstream call for which batch, shared by the processes'
    clients: a batch is named by its lines' ``custom_id`` prefix (``x3`` of ``x3-0``)."""

    def __init__(self) -> None:
        self.inside: dict[str, str] = {}  # batch -> the process in a call for it
        self.parts: dict[str, str] = {}  # Message Batch id -> batch
        self.overlaps: list[str] = []
        self.worked: dict[str, set[str]] = {}  # process -> batches it called about

    @asynccontextmanager
    async def call(self, process: str, kind: str, batch: str) -> AsyncIterator[None]:
        other = self.inside.get(batch, process)
        if other != process:
            self.overlaps.append(f"{kind} of {batch} by {process} while {other} was in one")
        self.inside[batch] = process
        self.worked.setdefault(process, set()).add(batch)
        try:
            await trio.sleep(0.01)  # wide enough for another stepper to walk in
            yield
        finally:
            self.inside.pop(batch, None)


class Upstream(MessageBatchesClient):
    """The simulator's Message Batches, with deliveries that can be held and calls that
    can be logged.

    ``hold(n)`` holds the results stream of every Message Batch whose results are asked
    for next (``only_first``: of the first one only) after ``n`` lines, until ``release``
    is set; ``held`` counts the streams being held, ``holding`` is set at the first.
    """

    def __init__(
        self,
        settings: Settings,
        pool: UpstreamPool,
        *,
        name: str = "",
        log: CallLog | None = None,
    ) -> None:
        super().__init__(settings, pool)
        self.release = trio.Event()
        self.holding = trio.Event()
        self.held = 0
        self.results_calls: list[str] = []
        self._hold_after: int | None = None
        self._only_first = False
        self._name = name
        self._log = log

    def hold(self, after: int, *, only_first: bool = False) -> None:
        self._hold_after, self._only_first = after, only_first

    @asynccontextmanager
    async def _call(self, kind: str, batch: str) -> AsyncIterator[None]:
        if self._log is None:
            yield
        else:
            async with self._log.call(self._name, kind, batch):
                yield

    async def create(self, body: Any) -> dict[str, Any]:
        batch = (await trio.to_thread.run_sync(_first_custom_id, body)).split("-")[0]
        async with self._call("create", batch):
            answer = await super().create(body)
        if self._log is not None:
            self._log.parts[answer["id"]] = batch
        return answer

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        async with self._call("retrieve", self._batch(batch_id)):
            return await super().retrieve(batch_id)

    async def results(self, batch_id: str) -> AsyncGenerator[bytes, None]:
        self.results_calls.append(batch_id)
        after = self._hold_after
        if self._only_first:
            self._hold_after = None
        async with (
            self._call("results", self._batch(batch_id)),
            aclosing(super().results(batch_id)) as lines,
        ):
            n = 0
            async for raw in lines:
                yield raw
                n += 1
                if n == after and not self.release.is_set():
                    self.held += 1
                    self.holding.set()
                    try:
                        await self.release.wait()
                    finally:
                        self.held -= 1

    def _batch(self, message_batch_id: str) -> str:
        return message_batch_id if self._log is None else self._log.parts[message_batch_id]


def _first_custom_id(body: Any) -> str:
    """The first request's ``custom_id`` in a create's body (bytes, or a file on disk)."""
    path = getattr(body, "path", None)
    raw = Path(path).read_bytes()[:4096] if path is not None else bytes(body)[:4096]
    found = re.search(rb'"custom_id"\s*:\s*"([^"]+)"', raw)
    assert found is not None
    return found.group(1).decode()


class Process:
    """What one gateway process has of the Batch API: its stores and its poller."""

    def __init__(
        self, data: Path, settings: Settings, pool: UpstreamPool, upstream: Upstream, **kw: Any
    ) -> None:
        self.files = SQLiteFileStore(data)
        self.batches = SQLiteBatchStore(data, self.files)
        self.upstream = upstream
        self.poller = BatchPoller(
            self.batches,
            self.files,
            upstream,
            TranslationOptions(
                default_model=MODEL,
                default_max_tokens=settings.default_max_tokens,
                anthropic_version=settings.anthropic_version,
            ),
            data / "batch-work" / "dep",
            **kw,
        )

    async def create(self, lines: bytes) -> str:
        async with self.files.write_file("alice", "in.jsonl", BATCH_INPUT) as sink:
            await sink.write(lines)
        made = int(time.time())
        batch = new_batch(sink.record.id, "/v1/chat/completions", None, None, made)
        record = await self.batches.create("alice", batch)
        self.poller.wake()
        return record.id

    async def status(self, batch_id: str) -> str:
        record = await self.batches.get("alice", batch_id)
        assert record is not None
        return record.status

    async def until(self, batch_id: str, statuses: set[str], seconds: float) -> str:
        with trio.fail_after(seconds):
            while (status := await self.status(batch_id)) not in statuses:  # noqa: ASYNC110
                await trio.sleep(0.02)
        return status

    async def aclose(self) -> None:
        await self.batches.aclose()
        await self.files.aclose()


@asynccontextmanager
async def offline(
    tmp_path: Path, config: SimulatorConfig | None = None
) -> AsyncIterator[tuple[Any, Settings, UpstreamPool]]:
    async with running_simulator(config or SimulatorConfig(batch_processing_s=0.0)) as sim:
        settings = Settings(anthropic_base_url=sim.url, anthropic_api_key=SIM_KEY)
        pool = UpstreamPool(sim.url, connect_timeout=5.0)
        try:
            yield sim, settings, pool
        finally:
            with trio.CancelScope(shield=True):
                await pool.aclose()


@asynccontextmanager
async def process(
    tmp_path: Path,
    settings: Settings,
    pool: UpstreamPool,
    upstream: Upstream | None = None,
    **kw: Any,
) -> AsyncIterator[Process]:
    """A process polling in the background until the block ends."""
    proc = Process(tmp_path, settings, pool, upstream or Upstream(settings, pool), **kw)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(proc.poller.run)
            yield proc
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await proc.aclose()


async def creates(sim: Any) -> int:
    return len([r for r in await sim.received() if r["path"].endswith("/messages/batches")])


async def test_a_small_batch_completes_while_a_large_ones_delivery_is_under_way(
    tmp_path: Path,
) -> None:
    """50,000 lines being delivered (the results stream held after 1,000) and 3 lines: the
    small batch is validated, sent, followed and delivered meanwhile; then the large one
    ends too, whole."""
    async with offline(
        tmp_path, SimulatorConfig(batch_processing_s=0.0, request_log_entries=0)
    ) as (
        _sim,
        settings,
        pool,
    ):
        upstream = Upstream(settings, pool)
        upstream.hold(1000, only_first=True)
        async with process(tmp_path, settings, pool, upstream) as proc:
            large = await proc.create(b"".join(line(f"big-{n}", n) for n in range(50_000)))
            with trio.fail_after(240):
                await upstream.holding.wait()
            assert await proc.status(large) == "finalizing"

            small = await proc.create(b"".join(line(f"small-{n}", n) for n in range(3)))
            assert await proc.until(small, FINAL, 15) == "completed"
            assert upstream.held == 1 and await proc.status(large) == "finalizing"

            upstream.release.set()
            assert await proc.until(large, FINAL, 240) == "completed"
            record = await proc.batches.get("alice", large)
            assert record is not None
            assert record.batch["request_counts"]["completed"] == 50_000
            assert len(upstream.results_calls) == 2  # the held delivery never began again


async def test_steps_in_flight_are_bounded_and_a_batch_in_a_step_is_not_stepped_again(
    tmp_path: Path,
) -> None:
    """Concurrency 2 and three batches whose deliveries are all held: two deliveries run, the
    third waits for a slot (rounds go on meanwhile, woken again and again, and step neither
    held batch a second time); released, all three complete."""
    async with offline(tmp_path) as (_sim, settings, pool):
        upstream = Upstream(settings, pool)
        upstream.hold(1)
        async with process(tmp_path, settings, pool, upstream, concurrency=2) as proc:
            ids = [await proc.create(line(f"b{k}", k)) for k in range(3)]
            with trio.fail_after(15):
                while upstream.held < 2:  # noqa: ASYNC110
                    await trio.sleep(0.02)
            for _ in range(10):  # rounds, each woken at once
                proc.poller.wake()
                await trio.sleep(0.3)
            assert upstream.held == 2
            assert len(upstream.results_calls) == 2 == len(set(upstream.results_calls))
            assert [await proc.status(i) for i in ids].count("finalizing") >= 2
            upstream.release.set()
            for batch_id in ids:
                assert await proc.until(batch_id, FINAL, 15) == "completed"
            assert len(upstream.results_calls) == 3


async def test_two_pollers_on_one_directory_share_the_batches_each_stepped_by_one(
    tmp_path: Path,
) -> None:
    """Two processes of one deployment. The first holds a delivery under way; then twelve
    more batches are made through both. No batch is ever in a call to the upstream from
    both at once, each Message Batch is created once, the work is shared, and the held
    batch is never taken over: the others all complete meanwhile, and it completes once
    let go."""
    config = SimulatorConfig(batch_processing_s=0.1)
    async with offline(tmp_path, config) as (sim, settings, pool):
        log = CallLog()
        up_a = Upstream(settings, pool, name="a", log=log)
        up_b = Upstream(settings, pool, name="b", log=log)
        up_a.hold(1, only_first=True)
        async with process(tmp_path, settings, pool, up_a, concurrency=2) as a:
            held = await a.create(b"".join(line(f"h-{n}", n) for n in range(3)))
            with trio.fail_after(15):
                await up_a.holding.wait()
            async with process(tmp_path, settings, pool, up_b, concurrency=2) as b:
                others = [
                    await (a if k % 2 else b).create(
                        b"".join(line(f"x{k}-{n}", n) for n in range(3))
                    )
                    for k in range(12)
                ]
                assert [await b.until(i, FINAL, 60) for i in others] == ["completed"] * 12
                assert await b.status(held) == "finalizing"  # b never took it over
                assert up_a.held == 1
                assert len(up_a.results_calls + up_b.results_calls) == 13
                up_a.release.set()
                assert await b.until(held, FINAL, 30) == "completed"
        assert log.overlaps == []
        assert await creates(sim) == 13
        assert log.worked["a"] - {"h"} and log.worked["b"]  # both stepped batches
        assert "h" not in log.worked["b"]
        assert not list((tmp_path / "batch-work" / "dep").glob("batch_*"))


async def test_a_failing_step_is_logged_and_retried_while_the_others_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream answers 500 to the first retrievals of one batch: that step is logged
    and retried on later rounds, the other batch is not held up, and both complete."""

    class Flaky(Upstream):
        failures = 3
        flaky = ""  # the Message Batch of the batch named "first"

        async def create(self, body: Any) -> dict[str, Any]:
            name = await trio.to_thread.run_sync(_first_custom_id, body)
            answer = await super().create(body)
            if name == "first":
                self.flaky = str(answer["id"])
            return answer

        async def retrieve(self, batch_id: str) -> dict[str, Any]:
            if self.failures and batch_id == self.flaky:
                self.failures -= 1
                raise ProxyError(502, "The upstream is down.", code="upstream_error")
            return await super().retrieve(batch_id)

    async with (
        offline(tmp_path) as (_sim, settings, pool),
        process(tmp_path, settings, pool, Flaky(settings, pool)) as proc,
    ):
        first = await proc.create(line("first", 0))
        second = await proc.create(line("second", 1))
        assert await proc.until(second, FINAL, 20) == "completed"
        assert await proc.until(first, FINAL, 20) == "completed"
    failed = [r.getMessage() for r in caplog.records if "step failed, will retry" in r.message]
    assert len(failed) == 3 and all(first in m for m in failed)


async def test_a_poller_cancelled_mid_delivery_leaves_the_batch_to_the_next(tmp_path: Path) -> None:
    """Shutdown during a delivery lets go of the claim and the spool files; the batch is
    still ``finalizing``, and the next poller delivers it whole, creating nothing again."""
    async with offline(tmp_path) as (sim, settings, pool):
        upstream = Upstream(settings, pool)
        upstream.hold(10)
        async with process(tmp_path, settings, pool, upstream) as first:
            batch_id = await first.create(b"".join(line(f"c{n}", n) for n in range(50)))
            with trio.fail_after(15):
                await upstream.holding.wait()
        work = tmp_path / "batch-work" / "dep"
        assert not list(work.glob("batch_*"))  # neither claim nor spool left behind
        async with process(tmp_path, settings, pool) as second:
            assert await second.status(batch_id) == "finalizing"
            assert await second.until(batch_id, FINAL, 15) == "completed"
            record = await second.batches.get("alice", batch_id)
            assert record is not None and record.batch["request_counts"]["completed"] == 50
        assert await creates(sim) == 1


async def test_a_poller_of_an_older_version_holding_the_lock_polls_alone(tmp_path: Path) -> None:
    """A gateway from before per-batch claims holds ``poller.lock`` exclusively and steps
    every batch itself: a newer poller steps none until it is gone, then takes over."""
    work = tmp_path / "batch-work" / "dep"
    work.mkdir(parents=True)
    old = os.open(work / "poller.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(old, fcntl.LOCK_EX | fcntl.LOCK_NB)
        async with (
            offline(tmp_path) as (sim, settings, pool),
            process(tmp_path, settings, pool) as proc,
        ):
            batch_id = await proc.create(line("only", 0))
            await trio.sleep(1.0)
            assert await proc.status(batch_id) == "validating"
            assert await creates(sim) == 0
            os.close(old)
            old = -1
            assert await proc.until(batch_id, FINAL, 15) == "completed"
    finally:
        if old >= 0:
            os.close(old)
