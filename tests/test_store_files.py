"""The embedded file store on a real directory: streaming both ways in bounded memory, atomic
uploads, owner isolation, paging, delete, expiry and restarts."""

from __future__ import annotations

import hashlib
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from trio_batcher.store import (
    FileNotFound,
    FileRecord,
    FileTooLarge,
    LineTooLong,
    SQLiteFileStore,
)

NOW = 1_800_000_000.0
MiB = 1024 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> SQLiteFileStore:
    return SQLiteFileStore(tmp_path / "data", clock=clock)


async def put(
    store: SQLiteFileStore, data: bytes, *, owner: str = "alice", name: str = "in.jsonl"
) -> FileRecord:
    async with store.write_file(owner, name, "batch") as sink:
        await sink.write(data)
    return sink.record


async def read_all(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def leftovers(store: SQLiteFileStore) -> list[str]:
    return sorted(p.name for p in store.contents_dir.iterdir())


async def test_a_20_mb_file_streams_in_and_out_in_64_kib_chunks_with_bounded_memory(
    store: SQLiteFileStore,
) -> None:
    piece = bytes(range(256)) * 256  # 64 KiB
    written = hashlib.sha256()
    tracemalloc.start()
    try:
        async with store.write_file("alice", "big.jsonl", "batch") as sink:
            for i in range(320):
                chunk = i.to_bytes(4, "big") + piece[4:]
                written.update(chunk)
                await sink.write(chunk)
        _, write_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        read = hashlib.sha256()
        sizes = set()
        async for chunk in store.read_file("alice", sink.record.id):
            sizes.add(len(chunk))
            read.update(chunk)
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sink.record.bytes == 20 * MiB
    assert read.digest() == written.digest()
    assert max(sizes) == 64 * 1024
    assert write_peak < 2 * MiB, write_peak
    assert read_peak < 2 * MiB, read_peak


async def test_a_stored_file_is_an_openai_file_object(store: SQLiteFileStore) -> None:
    record = await put(store, b'{"a":1}\n')
    assert record.id.startswith("file-")
    assert record.to_openai() == {
        "id": record.id,
        "object": "file",
        "bytes": 8,
        "created_at": int(NOW),
        "filename": "in.jsonl",
        "purpose": "batch",
        "status": "processed",
        "status_details": None,
        "expires_at": None,
    }
    assert await store.get("alice", record.id) == record
    assert leftovers(store) == [record.id]


async def test_lines_are_read_across_chunk_boundaries(tmp_path: Path) -> None:
    store = SQLiteFileStore(tmp_path, chunk_bytes=7)
    record = await put(store, b"first line\r\n\nx\na much longer line than one chunk\nlast")
    lines = [line async for line in store.read_lines("alice", record.id)]
    assert lines == [b"first line", b"", b"x", b"a much longer line than one chunk", b"last"]
    empty = await put(store, b"")
    assert [line async for line in store.read_lines("alice", empty.id)] == []


async def test_a_line_longer_than_allowed_is_refused_with_its_number(tmp_path: Path) -> None:
    store = SQLiteFileStore(tmp_path, chunk_bytes=4)
    record = await put(store, b"short\n" + b"y" * 40 + b"\nshort\n")
    got: list[bytes] = []
    with pytest.raises(LineTooLong) as caught:
        async for line in store.read_lines("alice", record.id, max_line_bytes=16):
            got.append(line)
    assert got == [b"short"]
    assert (caught.value.line, caught.value.limit) == (2, 16)


async def test_a_cancelled_upload_leaves_no_record_and_no_bytes(store: SQLiteFileStore) -> None:
    with trio.CancelScope() as scope:
        async with store.write_file("alice", "in.jsonl", "batch") as sink:
            await sink.write(b"x" * 100_000)
            scope.cancel()
            await sink.write(b"y")
    assert scope.cancelled_caught
    assert leftovers(store) == []
    assert (await store.list("alice")).data == []


async def test_a_failed_upload_leaves_no_record_and_no_bytes(store: SQLiteFileStore) -> None:
    with pytest.raises(ValueError, match="client went away"):
        async with store.write_file("alice", "in.jsonl", "batch") as sink:
            await sink.write(b"x" * 1000)
            raise ValueError("client went away")
    assert leftovers(store) == []
    assert (await store.list("alice")).data == []


async def test_an_upload_over_its_limit_is_refused_before_the_write(
    store: SQLiteFileStore,
) -> None:
    with pytest.raises(FileTooLarge) as caught:
        async with store.write_file("alice", "in.jsonl", "batch", max_bytes=10) as sink:
            await sink.write(b"x" * 6)
            await sink.write(b"x" * 4)
            await sink.write(b"x")
    assert caught.value.limit == 10
    assert sink.bytes_written == 10
    assert leftovers(store) == []
    async with store.write_file("alice", "in.jsonl", "batch", max_bytes=10) as sink:
        await sink.write(b"x" * 10)
    assert sink.record.bytes == 10


async def test_another_owners_file_does_not_exist(store: SQLiteFileStore) -> None:
    record = await put(store, b"secret\n")
    assert await store.get("bob", record.id) is None
    assert (await store.list("bob")).data == []
    with pytest.raises(FileNotFound):
        await read_all(store.read_file("bob", record.id))
    with pytest.raises(FileNotFound):
        _ = [line async for line in store.read_lines("bob", record.id)]
    assert not await store.delete("bob", record.id)
    assert await read_all(store.read_file("alice", record.id)) == b"secret\n"


async def test_files_are_listed_newest_first_a_page_at_a_time(store: SQLiteFileStore) -> None:
    ids = [(await put(store, b"x", name=f"{n}.jsonl")).id for n in range(5)]
    await put(store, b"x", owner="bob")
    async with store.write_file("alice", "out.jsonl", "batch_output") as sink:
        await sink.write(b"out")
    first = await store.list("alice", limit=2, purpose="batch")
    assert [r.id for r in first.data] == [ids[4], ids[3]] and first.has_more
    second = await store.list("alice", after=first.data[-1].id, limit=2, purpose="batch")
    assert [r.id for r in second.data] == [ids[2], ids[1]] and second.has_more
    await store.delete("alice", ids[1])  # a cursor outlives the file it names
    third = await store.list("alice", after=ids[1], limit=2, purpose="batch")
    assert [r.id for r in third.data] == [ids[0]] and not third.has_more
    everything = await store.list("alice")
    assert everything.data[0].purpose == "batch_output"
    assert len(everything.data) == 5 and not everything.has_more


async def test_a_deleted_file_loses_its_record_and_its_bytes(store: SQLiteFileStore) -> None:
    record = await put(store, b"gone\n")
    assert await store.delete("alice", record.id)
    assert not await store.delete("alice", record.id)
    assert await store.get("alice", record.id) is None
    assert leftovers(store) == []
    with pytest.raises(FileNotFound):
        await read_all(store.read_file("alice", record.id))


async def test_a_file_being_read_when_deleted_is_read_to_its_end(tmp_path: Path) -> None:
    store = SQLiteFileStore(tmp_path, chunk_bytes=4)
    record = await put(store, b"0123456789")
    chunks = store.read_file("alice", record.id)
    assert await chunks.__anext__() == b"0123"
    assert await store.delete("alice", record.id)
    assert await read_all(chunks) == b"456789"


async def test_files_survive_a_restart(tmp_path: Path) -> None:
    first = SQLiteFileStore(tmp_path / "data")
    record = await put(first, b"kept\n")
    await first.aclose()
    second = SQLiteFileStore(tmp_path / "data")
    assert await second.get("alice", record.id) == record
    assert await read_all(second.read_file("alice", record.id)) == b"kept\n"
    await second.aclose()


async def test_an_expired_file_is_invisible_then_purged(
    store: SQLiteFileStore, clock: Clock
) -> None:
    async with store.write_file("alice", "o.jsonl", "batch_output", expires_at=int(NOW) + 60) as s:
        await s.write(b"out\n")
    kept = await put(store, b"in\n")
    assert await store.purge_expired(NOW) == 0
    clock.now = NOW + 60
    assert await store.get("alice", s.record.id) is None
    assert [r.id for r in (await store.list("alice")).data] == [kept.id]
    assert await store.purge_expired(clock.now) == 1
    assert await store.purge_expired(clock.now) == 0
    assert leftovers(store) == [kept.id]


async def test_purge_sweeps_day_old_orphans_of_a_crash(store: SQLiteFileStore) -> None:
    kept = await put(store, b"in\n")
    (store.contents_dir / "file-orphan").write_bytes(b"renamed, never recorded")
    (store.contents_dir / ".file-upload.part").write_bytes(b"half an upload")
    assert await store.purge_expired(time.time() + 3600) == 0  # too young: may be in progress
    assert len(leftovers(store)) == 3
    await store.purge_expired(time.time() + 2 * 86_400)
    assert leftovers(store) == [kept.id]
    assert await read_all(store.read_file("alice", kept.id)) == b"in\n"


async def test_a_store_never_written_creates_nothing(tmp_path: Path) -> None:
    store = SQLiteFileStore(tmp_path / "data")
    assert await store.get("alice", "file-x") is None
    assert (await store.list("alice")).data == []
    assert not await store.delete("alice", "file-x")
    assert await store.purge_expired(NOW) == 0
    assert not (tmp_path / "data").exists()
