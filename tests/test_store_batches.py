"""The embedded batch store on a real directory: records, compare-and-set, the poller's view
after a restart, the request mapping as a stream, and the retention purge with its files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trio_batcher.store import (
    BatchConflict,
    BatchRequest,
    SQLiteBatchStore,
    SQLiteFileStore,
    UpstreamBatch,
)

NOW = 1_800_000_000
DAY = 86_400


def batch(status: str = "validating", **fields: Any) -> dict[str, Any]:
    return {
        "endpoint": "/v1/chat/completions",
        "input_file_id": "file-in",
        "completion_window": "24h",
        "status": status,
        "created_at": NOW,
        "expires_at": NOW + DAY,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "metadata": {"job": "nightly"},
        "errors": None,
        **fields,
    }


def stores(directory: Path) -> tuple[SQLiteFileStore, SQLiteBatchStore]:
    files = SQLiteFileStore(directory)
    return files, SQLiteBatchStore(directory, files, clock=lambda: NOW + 5.0)


async def test_a_created_batch_is_an_openai_batch_object_visible_to_its_owner_only(
    tmp_path: Path,
) -> None:
    _, store = stores(tmp_path)
    record = await store.create("alice", batch())
    assert record.id.startswith("batch_") and record.version == 1
    assert record.to_openai() == {**batch(), "id": record.id, "object": "batch"}
    assert await store.get("alice", record.id) == record
    assert await store.get("bob", record.id) is None
    assert (await store.list("bob")).data == []


async def test_a_batch_without_a_known_status_is_refused(tmp_path: Path) -> None:
    _, store = stores(tmp_path)
    with pytest.raises(ValueError, match="status"):
        await store.create("alice", batch(status="done"))


async def test_batches_are_listed_newest_first_a_page_at_a_time(tmp_path: Path) -> None:
    _, store = stores(tmp_path)
    ids = [(await store.create("alice", batch())).id for _ in range(5)]
    first = await store.list("alice", limit=3)
    assert [r.id for r in first.data] == ids[:1:-1] and first.has_more
    rest = await store.list("alice", after=first.data[-1].id, limit=3)
    assert [r.id for r in rest.data] == [ids[1], ids[0]] and not rest.has_more


async def test_an_update_from_a_stale_read_is_refused(tmp_path: Path) -> None:
    _, store = stores(tmp_path)
    created = await store.create("alice", batch())
    started = await store.update(
        created.evolve(
            status="in_progress",
            in_progress_at=NOW + 1,
            upstream=[UpstreamBatch("msgbatch_1", first_line=1, requests=3)],
        )
    )
    assert started.version == 2 and started.updated_at == NOW + 5.0
    with pytest.raises(BatchConflict):
        await store.update(created.evolve(status="cancelling", cancelling_at=NOW + 2))
    got = await store.get("alice", created.id)
    assert got == started
    assert got.status == "in_progress" and got.upstream[0].id == "msgbatch_1"


async def test_unfinished_batches_are_found_again_after_a_restart(tmp_path: Path) -> None:
    _, store = stores(tmp_path)
    upstream = (UpstreamBatch("msgbatch_a", 1, 2, "ended", "https://results/a", delivered=True),)
    waiting = await store.create("alice", batch("in_progress"), upstream)
    await store.create("bob", batch("completed", completed_at=NOW + 10))
    cancelling = await store.create("bob", batch("cancelling"))
    checking = await store.create("alice", batch("validating"))
    await store.create("alice", batch("failed", failed_at=NOW))
    await store.aclose()

    _, restarted = stores(tmp_path)
    found = await restarted.unfinished()
    assert [r.id for r in found] == [waiting.id, cancelling.id, checking.id]
    assert found[0].upstream == upstream and found[1].owner == "bob"
    await restarted.aclose()


async def test_request_lines_stream_back_in_order_and_map_upstream_ids(tmp_path: Path) -> None:
    _, store = stores(tmp_path)
    record = await store.create("alice", batch())
    lines = [BatchRequest(n, f"custom id {n}", f"r{n}") for n in range(1, 2501)]
    for start in range(0, len(lines), 1000):
        await store.add_requests(record.id, lines[start : start + 1000])
    await store.add_requests(record.id, lines[:10])  # a validation pass run again
    assert [r async for r in store.requests(record.id)] == lines
    assert [r.line async for r in store.requests(record.id, after_line=2498)] == [2499, 2500]
    found = await store.find_custom_ids(record.id, ["custom id 7", "custom id 2000", "x"] * 300)
    assert found == {"custom id 7": 7, "custom id 2000": 2000}
    assert await store.find_custom_ids("batch_other", ["custom id 7"]) == {}


async def test_results_come_back_in_input_order_whatever_order_they_were_indexed_in(
    tmp_path: Path,
) -> None:
    _, store = stores(tmp_path)
    record = await store.create("alice", batch())
    lines = [BatchRequest(n, f"c{n}", f"u{n}") for n in range(1, 2502)]
    await store.add_requests(record.id, lines)
    indexed = [(f"u{n}", n * 10, n) for n in range(2501, 0, -1) if n % 7]  # every 7th missing
    await store.add_results(record.id, indexed[:1000])
    await store.add_results(record.id, [*indexed[1000:], ("u14", 5, 5), ("unknown", 1, 1)])
    got = [row async for row in store.ordered_results(record.id)]
    assert [r.line for r, _, _ in got] == list(range(1, 2502))
    for request, offset, length in got:
        n = request.line
        if n % 7:
            assert (offset, length) == (n * 10, n)
        else:
            assert (offset, length) == ((5, 5) if n == 14 else (None, None))
    await store.clear_results(record.id)
    assert {(o, n) async for _, o, n in store.ordered_results(record.id)} == {(None, None)}
    await store.clear_requests(record.id)
    assert [r async for r in store.requests(record.id)] == []


async def test_purge_removes_finished_batches_and_their_files_after_the_retention(
    tmp_path: Path,
) -> None:
    files, store = stores(tmp_path)
    ids = {}
    for name in ("in", "shared", "out", "err"):
        async with files.write_file("alice", f"{name}.jsonl", "batch") as sink:
            await sink.write(b"{}\n")
        ids[name] = sink.record.id
    old = await store.create(
        "alice",
        batch(
            "completed",
            input_file_id=ids["in"],
            output_file_id=ids["out"],
            error_file_id=ids["err"],
            completed_at=NOW,
        ),
    )
    await store.add_requests(old.id, [BatchRequest(1, "a", "a")])
    old_shared = await store.create(
        "alice", batch("cancelled", input_file_id=ids["shared"], cancelled_at=NOW)
    )
    still_reading = await store.create("alice", batch("in_progress", input_file_id=ids["shared"]))
    recent = await store.create("alice", batch("expired", expired_at=NOW + 2 * DAY))

    assert await store.purge_finished(NOW + DAY - 1, retention_s=DAY) == 0
    assert await store.purge_finished(NOW + DAY, retention_s=DAY) == 2
    assert await store.purge_finished(NOW + DAY, retention_s=DAY) == 0

    assert await store.get("alice", old.id) is None
    assert await store.get("alice", old_shared.id) is None
    assert [r async for r in store.requests(old.id)] == []
    remaining = {r.id for r in (await files.list("alice")).data}
    assert remaining == {ids["shared"]}
    assert {r.id for r in (await store.list("alice")).data} == {still_reading.id, recent.id}


async def test_status_counts_count_every_owners_batches_by_status_as_they_move(
    tmp_path: Path,
) -> None:
    # The observatory's batches-by-status gauge: every owner together, statuses without a
    # batch left out, an update moving a batch from one count to the other, and a purge
    # taking finished ones out.
    _, store = stores(tmp_path)
    assert await store.status_counts() == {}  # no database file yet: nothing created
    running = await store.create("alice", batch("in_progress"))
    await store.create("bob", batch("in_progress"))
    await store.create("bob", batch("validating"))
    await store.create("alice", batch("failed", failed_at=NOW))
    assert await store.status_counts() == {"in_progress": 2, "validating": 1, "failed": 1}

    await store.update(running.evolve(status="completed", completed_at=NOW))
    assert await store.status_counts() == {
        "in_progress": 1,
        "validating": 1,
        "failed": 1,
        "completed": 1,
    }
    assert await store.purge_finished(NOW + DAY, retention_s=DAY) == 2
    assert await store.status_counts() == {"in_progress": 1, "validating": 1}
    await store.aclose()
