"""The Batch API where files get large or processes many: repeats found on disk, uploads
the server hands over in one piece, several Message Batches for one file, several proxies
on one data directory, and a Message Batch the upstream forgets.

Real loopback HTTP against the simulator, real SQLite in ``tmp_path``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import trio
from batch_support import FINAL, MODEL, line
from support import SIM_KEY, openai_client, proxy_settings, running_proxy, running_simulator

from trio_batcher.edge.openai_batches import new_batch
from trio_batcher.offline import BatchPoller
from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.store import SQLiteBatchStore, SQLiteFileStore
from trio_batcher.store.files import BATCH_INPUT
from trio_batcher.translation.openai_chat import TranslationOptions
from trio_batcher.upstream.batches import MessageBatchesClient
from trio_batcher.upstream.pool import UpstreamPool


async def until_final(client: Any, batch_id: str, seconds: float = 30) -> Any:
    with trio.fail_after(seconds):
        while (batch := await client.batches.retrieve(batch_id)).status not in FINAL:  # noqa: ASYNC110
            await trio.sleep(0.05)
    return batch


async def create(client: Any, content: bytes) -> Any:
    uploaded = await client.files.create(file=("in.jsonl", content), purpose="batch")
    return await client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


async def test_repeats_are_found_across_slices_of_the_on_disk_id_table(tmp_path: Path) -> None:
    ids = [f"item-{n}" for n in range(2500)]
    ids[1499] = ids[1498]  # inside one slice of 1,000
    ids[2399] = ids[2]  # two slices after the first use
    ids[1999] = ids[10]  # a repeat that is also a bad line: reported once, as the repeat
    lines = [line(i, n) for n, i in enumerate(ids)]
    bad = {"custom_id": ids[1999], "method": "POST", "url": "/v1/chat/completions", "body": {}}
    lines[1999] = json.dumps(bad).encode() + b"\n"
    content = b"".join(lines)
    async with (
        running_simulator() as sim,
        running_proxy(proxy_settings(sim, data_dir=str(tmp_path))) as url,
    ):
        client = openai_client(url)
        batch = await until_final(client, (await create(client, content)).id)
        assert batch.status == "failed"
        assert [(e.line, e.code) for e in batch.errors.data] == [
            (1500, "duplicate_custom_id"),
            (2000, "duplicate_custom_id"),
            (2400, "duplicate_custom_id"),
        ]
        assert not [r for r in await sim.received() if "/messages/batches" in r["path"]]


async def test_an_upload_handed_over_in_one_large_chunk_is_stored_whole(tmp_path: Path) -> None:
    content = b"".join(line(f"item-{n}", n) for n in range(3000))  # ~400 KB
    boundary = "b0undary"

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: it arrives as it comes
        yield (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"'
            "\r\nContent-Type: application/jsonl\r\n\r\n"
        ).encode()
        yield content
        yield f"\r\n--{boundary}--\r\n".encode()

    async with (
        running_simulator() as sim,
        running_proxy(proxy_settings(sim, data_dir=str(tmp_path))) as url,
        httpx2.AsyncClient(trust_env=False) as http,
    ):
        response = await http.post(
            f"{url}/v1/files",
            content=chunked(),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
        assert response.status_code == 200, response.text
        assert response.json()["bytes"] == len(content)
        stored = await http.get(f"{url}/v1/files/{response.json()['id']}/content")
        assert stored.content == content


async def test_a_file_split_into_several_message_batches_comes_back_whole_and_in_order(
    tmp_path: Path,
) -> None:
    """Cut by count (300 a batch) and by bytes (a body under 40 KB): every part's body is
    streamed from the spool, and the results of all parts return in input order."""
    count = 1000
    async with _offline(tmp_path) as (_sim, settings, files, batches, pool):
        for max_requests, max_bytes in ((300, 10**9), (10**6, 40_000)):
            poller = _poller(
                batches,
                files,
                MessageBatchesClient(settings, pool),
                tmp_path / "work",
                max_batch_requests=max_requests,
                max_batch_bytes=max_bytes,
            )
            async with files.write_file("alice", "in.jsonl", BATCH_INPUT) as sink:
                await sink.write(b"".join(line(f"id {n}", n) for n in range(count)))
            record = await batches.create("alice", _batch(sink.record.id))
            stored = await _drive(poller, batches, record.id)
            assert stored.status == "completed"
            sizes = [part.requests for part in stored.upstream]
            assert sum(sizes) == count and len(sizes) >= 4
            assert all(size <= max_requests for size in sizes)
            output = b"".join(
                [c async for c in files.read_file("alice", stored.batch["output_file_id"])]
            )
            got = [json.loads(raw)["custom_id"] for raw in output.splitlines()]
            assert got == [f"id {n}" for n in range(count)]
            assert not list((tmp_path / "work").glob("batch_*"))  # no spool left behind


async def test_two_proxies_on_one_data_directory_send_each_batch_once(tmp_path: Path) -> None:
    """As ``serve --workers 2`` runs them: one poller leads; a batch made through the other
    proxy is still sent (once) and delivered."""
    async with running_simulator(SimulatorConfig(batch_processing_s=0.2)) as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path))
        async with running_proxy(settings) as first, running_proxy(settings) as second:
            made = []
            for url in (first, second, second):
                client = openai_client(url)
                made.append(
                    (client, await create(client, b"".join(line(f"x{n}", n) for n in range(5))))
                )
            for client, batch in made:
                done = await until_final(client, batch.id)
                assert done.status == "completed" and done.request_counts.completed == 5
        creates = [r for r in await sim.received() if r["path"].endswith("/messages/batches")]
        assert len(creates) == 3


async def test_a_message_batch_the_upstream_no_longer_knows_fails_the_batch(tmp_path: Path) -> None:
    """The proxy comes back pointed at an upstream that never saw its Message Batch (another
    account, a base URL changed, one deployment kept by its DEPLOYMENT_ID): after a few 404s
    in a row the batch fails, saying so, instead of asking forever."""
    config = SimulatorConfig(batch_processing_s=30.0)
    async with running_simulator(config) as first:
        settings = proxy_settings(first, data_dir=str(tmp_path), deployment_id="team-a")
        async with running_proxy(settings) as url:
            client = openai_client(url)
            batch = await create(client, line("only", 0))
            with trio.fail_after(10):
                while (await client.batches.retrieve(batch.id)).status != "in_progress":  # noqa: ASYNC110
                    await trio.sleep(0.02)
    async with running_simulator(config) as other:
        moved = proxy_settings(other, data_dir=str(tmp_path), deployment_id="team-a")
        async with running_proxy(moved) as url:
            done = await until_final(openai_client(url), batch.id)
    assert done.status == "failed"
    assert [e.code for e in done.errors.data] == ["upstream_batch_missing"]
    assert done.failed_at is not None


@asynccontextmanager
async def _offline(
    tmp_path: Path,
) -> AsyncIterator[tuple[Any, Settings, SQLiteFileStore, SQLiteBatchStore, UpstreamPool]]:
    """A simulator processing Message Batches at once, and the stores and pool a poller
    driven by hand needs; all closed however the test ends."""
    async with running_simulator(SimulatorConfig(batch_processing_s=0.0)) as sim:
        settings = Settings(anthropic_base_url=sim.url, anthropic_api_key=SIM_KEY)
        files = SQLiteFileStore(tmp_path)
        batches = SQLiteBatchStore(tmp_path, files)
        pool = UpstreamPool(sim.url, connect_timeout=5.0)
        try:
            yield sim, settings, files, batches, pool
        finally:
            with trio.CancelScope(shield=True):
                await pool.aclose()
                await batches.aclose()
                await files.aclose()


async def _drive(poller: BatchPoller, batches: SQLiteBatchStore, batch_id: str) -> Any:
    """Poll by hand until the batch is final; its record."""
    with trio.fail_after(60):
        while (stored := await batches.get("alice", batch_id)) is None or (
            stored.status not in FINAL
        ):
            await poller.poll_once()
            await trio.sleep(0.05)
    return stored


def _batch(input_file_id: str) -> dict[str, Any]:
    return new_batch(input_file_id, "/v1/chat/completions", None, None, int(time.time()))


def _poller(
    batches: SQLiteBatchStore,
    files: SQLiteFileStore,
    upstream: MessageBatchesClient,
    work: Path,
    **limits: int,
) -> BatchPoller:
    return BatchPoller(
        batches,
        files,
        upstream,
        TranslationOptions(
            default_model=MODEL,
            default_max_tokens=Settings().default_max_tokens,
            anthropic_version=Settings().anthropic_version,
        ),
        work,
        **limits,
    )


async def test_a_cancel_while_the_parts_are_being_created_sends_no_more_of_them(
    tmp_path: Path,
) -> None:
    count = 1000
    async with _offline(tmp_path) as (sim, settings, files, batches, pool):

        class CancelledAfterTwo(MessageBatchesClient):  # the client cancels meanwhile
            created = 0

            async def create(self, body: Any) -> dict[str, Any]:
                answer = await super().create(body)
                self.created += 1
                if self.created == 2:
                    stored = await batches.get("alice", record.id)
                    assert stored is not None
                    flags = {**stored.batch["_gateway"], "cancel_requested": True}
                    await batches.update(stored.evolve(status="cancelling", _gateway=flags))
                return answer

        poller = _poller(
            batches,
            files,
            CancelledAfterTwo(settings, pool),
            tmp_path / "work",
            max_batch_requests=100,
        )
        async with files.write_file("alice", "in.jsonl", BATCH_INPUT) as sink:
            await sink.write(b"".join(line(f"id-{n}", n) for n in range(count)))
        record = await batches.create("alice", _batch(sink.record.id))
        stored = await _drive(poller, batches, record.id)
        assert stored.status == "cancelled"
        assert [p.requests for p in stored.upstream] == [100, 100]
        creates = [r for r in await sim.received() if r["path"].endswith("/messages/batches")]
        assert len(creates) == 2
        counts = stored.batch["request_counts"]
        assert counts["total"] == count and counts["completed"] + counts["failed"] == count

        async def lines_of(file_id: str | None) -> list[dict[str, Any]]:
            if file_id is None:
                return []
            raw = b"".join([c async for c in files.read_file("alice", file_id)])
            return [json.loads(x) for x in raw.splitlines()]

        output = await lines_of(stored.batch["output_file_id"])
        errors = await lines_of(stored.batch["error_file_id"])
        assert len(output) == counts["completed"] <= 200
        unsent = [e for e in errors if int(e["custom_id"].split("-")[1]) >= 200]
        assert len(unsent) == count - 200
        assert {e["error"]["code"] for e in unsent} == {"batch_cancelled"}
        order = [int(x["custom_id"].split("-")[1]) for x in (*output, *errors)]
        assert sorted(order) == list(range(count))


async def test_spool_files_a_crashed_poller_left_are_removed_when_a_poller_starts(
    tmp_path: Path,
) -> None:
    work = tmp_path / "batch-work"
    work.mkdir()
    stale = [work / "batch_gone.body", work / "batch_gone.results"]
    for path in stale:
        path.write_bytes(b"x" * 1000)
    async with (
        running_simulator() as sim,
        running_proxy(proxy_settings(sim, data_dir=str(tmp_path))) as url,
    ):
        client = openai_client(url)
        done = await until_final(client, (await create(client, line("a", 0))).id)
        assert done.status == "completed"
        assert not any(path.exists() for path in stale)
