"""The embedded response store, on a real SQLite file: visibility, chains, expiry, purge."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from trio_batcher.store import SQLiteResponseStore, StoredResponse, owner_of
from trio_batcher.store.responses import ChainBroken

NOW = 1_800_000_000.0
DAY = 86_400.0


def record(
    rid: str,
    *,
    owner: str = "alice",
    previous: str | None = None,
    created: float = NOW,
    ttl: float = 30 * DAY,
) -> StoredResponse:
    return StoredResponse(
        id=rid,
        owner=owner,
        created_at=created,
        expires_at=created + ttl,
        previous_id=previous,
        response={
            "id": rid,
            "object": "response",
            "output": [{"id": f"msg_{rid}", "type": "message"}],
        },
        input_items=[{"id": f"in_{rid}", "type": "message", "role": "user"}],
    )


@pytest.fixture
def store(tmp_path: Path) -> SQLiteResponseStore:
    return SQLiteResponseStore(tmp_path / "data")


async def test_a_stored_response_is_read_back_whole(store: SQLiteResponseStore) -> None:
    await store.put(record("resp_1"))
    got = await store.get("resp_1", "alice", NOW + 1)
    assert got == record("resp_1")
    assert got is not None and got.items() == [
        {"id": "in_resp_1", "type": "message", "role": "user"},
        {"id": "msg_resp_1", "type": "message"},
    ]


async def test_another_owner_and_an_unknown_id_see_nothing(store: SQLiteResponseStore) -> None:
    await store.put(record("resp_1"))
    assert await store.get("resp_1", "bob", NOW) is None
    assert await store.get("resp_2", "alice", NOW) is None
    assert await store.chain("resp_1", "bob", NOW) is None
    assert not await store.delete("resp_1", "bob")
    assert await store.get("resp_1", "alice", NOW) is not None


async def test_an_expired_response_is_invisible_before_it_is_purged(
    store: SQLiteResponseStore,
) -> None:
    await store.put(record("resp_1", ttl=DAY))
    assert await store.get("resp_1", "alice", NOW + DAY - 1) is not None
    assert await store.get("resp_1", "alice", NOW + DAY) is None
    assert await store.chain("resp_1", "alice", NOW + DAY) is None


async def test_a_chain_is_rebuilt_oldest_turn_first(store: SQLiteResponseStore) -> None:
    await store.put(record("resp_1"))
    await store.put(record("resp_2", previous="resp_1"))
    await store.put(record("resp_3", previous="resp_2"))
    await store.put(record("resp_x", previous="resp_1"))  # a branch does not interfere
    chain = await store.chain("resp_3", "alice", NOW)
    assert chain is not None
    assert [r.id for r in chain] == ["resp_1", "resp_2", "resp_3"]
    branch = await store.chain("resp_x", "alice", NOW)
    assert branch is not None and [r.id for r in branch] == ["resp_1", "resp_x"]


async def test_a_chain_with_a_lost_ancestor_is_broken_not_shortened(
    store: SQLiteResponseStore,
) -> None:
    await store.put(record("resp_1", ttl=DAY))
    await store.put(record("resp_2", previous="resp_1"))
    await store.put(record("resp_3", previous="resp_2"))
    with pytest.raises(ChainBroken) as expired:
        await store.chain("resp_3", "alice", NOW + 2 * DAY)
    assert expired.value.missing_id == "resp_1"
    assert await store.delete("resp_2", "alice")
    with pytest.raises(ChainBroken) as deleted:
        await store.chain("resp_3", "alice", NOW)
    assert deleted.value.missing_id == "resp_2"


async def test_an_ancestor_of_another_owner_breaks_the_chain(store: SQLiteResponseStore) -> None:
    await store.put(record("resp_1", owner="bob"))
    await store.put(record("resp_2", previous="resp_1"))
    with pytest.raises(ChainBroken):
        await store.chain("resp_2", "alice", NOW)


async def test_delete_removes_once(store: SQLiteResponseStore) -> None:
    await store.put(record("resp_1"))
    assert await store.delete("resp_1", "alice")
    assert not await store.delete("resp_1", "alice")
    assert await store.get("resp_1", "alice", NOW) is None


async def test_purge_removes_exactly_the_expired(store: SQLiteResponseStore) -> None:
    await store.put(record("resp_old", created=NOW - 40 * DAY))
    await store.put(record("resp_new"))
    assert await store.purge_expired(NOW) == 1
    assert await store.purge_expired(NOW) == 0
    assert await store.get("resp_new", "alice", NOW) is not None


async def test_nothing_touches_the_disk_until_something_is_stored(tmp_path: Path) -> None:
    store = SQLiteResponseStore(tmp_path / "data")
    assert await store.purge_expired(NOW) == 0
    assert not (tmp_path / "data").exists()
    await store.put(record("resp_1"))
    assert store.path.is_file()
    await store.aclose()


async def test_records_survive_a_restart(tmp_path: Path) -> None:
    first = SQLiteResponseStore(tmp_path)
    await first.put(record("resp_1"))
    await first.put(record("resp_2", previous="resp_1"))
    await first.aclose()
    second = SQLiteResponseStore(tmp_path)
    chain = await second.chain("resp_2", "alice", NOW)
    assert chain is not None and [r.id for r in chain] == ["resp_1", "resp_2"]
    await second.aclose()


async def test_many_tasks_write_at_once(store: SQLiteResponseStore) -> None:
    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(store.put, record(f"resp_{i}"))
    for i in range(50):
        assert await store.get(f"resp_{i}", "alice", NOW) is not None


async def test_unicode_and_nesting_round_trip(store: SQLiteResponseStore) -> None:
    rec = StoredResponse(
        id="resp_u",
        owner="",
        created_at=NOW,
        expires_at=NOW + DAY,
        previous_id=None,
        response={
            "id": "resp_u",
            "output": [{"text": "héllo \u2028 🌍", "nested": [[{"a": None}]]}],
        },
        input_items=[],
    )
    await store.put(rec)
    assert await store.get("resp_u", "", NOW) == rec


def test_owners_are_key_hashes_never_keys() -> None:
    assert owner_of(None) == owner_of("") == ""
    owner = owner_of("sk-secret")
    assert len(owner) == 64 and "sk-secret" not in owner
    assert owner_of("sk-secret") == owner != owner_of("sk-other")


async def test_items_are_found_by_id_for_their_owner_while_visible(
    store: SQLiteResponseStore,
) -> None:
    assert await store.find_items(["msg_resp_1"], "alice", NOW) == {}  # nothing stored yet
    await store.put(record("resp_1", ttl=DAY))
    await store.put(record("resp_2"))
    found = await store.find_items(["msg_resp_1", "in_resp_2", "nope"], "alice", NOW)
    assert found == {
        "msg_resp_1": {"id": "msg_resp_1", "type": "message"},
        "in_resp_2": {"id": "in_resp_2", "type": "message", "role": "user"},
    }
    assert await store.find_items(["msg_resp_1"], "bob", NOW) == {}
    assert await store.find_items(["msg_resp_1"], "alice", NOW + DAY) == {}
    assert await store.delete("resp_2", "alice")
    assert await store.find_items(["in_resp_2"], "alice", NOW) == {}
    await store.purge_expired(NOW + 2 * DAY)
    assert await store.find_items(["msg_resp_1"], "alice", NOW) == {}


async def test_the_purge_runs_at_startup_then_hourly(autojump_clock: object) -> None:
    from trio_batcher.store.purge import purge_expired_periodically

    class Counting:
        def __init__(self) -> None:
            self.at: list[float] = []

        async def purge_expired(self, now: float) -> int:
            self.at.append(trio.current_time())
            return 0

    store = Counting()
    with trio.move_on_after(2 * 3600 + 1):
        await purge_expired_periodically(store)  # type: ignore[arg-type]
    assert store.at == [0.0, 3600.0, 7200.0]
