"""Namespaces and privacy of the embedded stores, on real SQLite files: which deployment a
gateway is, rows kept apart by it, an older data directory migrated and adopted, and the
modes of everything created (0700 / 0600 whatever the umask)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_store_responses import NOW, record

from trio_batcher.edge.openai_batches import new_batch
from trio_batcher.settings import Settings
from trio_batcher.store import (
    SQLiteBatchStore,
    SQLiteFileStore,
    SQLiteResponseStore,
    StoredResponse,
)
from trio_batcher.store.data_dir import check_data_dir
from trio_batcher.store.deployment import Deployment, deployment_of, simulated_id
from trio_batcher.store.files import BATCH_INPUT
from trio_batcher.store.responses import UnknownCursor
from trio_batcher.tenants.sqlite_spend import SQLiteSpendStore

REAL = Deployment("https://api.anthropic.com#0123456789ab", adopts_legacy=True)
OTHER = Deployment("https://gateway.example#ba9876543210", adopts_legacy=True)
SIMULATED = Deployment("simulated")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def test_the_id_is_the_upstream_and_a_key_fingerprint_never_the_key() -> None:
    key = "sk-ant-api03-secret-secret-secret"
    one = deployment_of(
        Settings(anthropic_base_url="https://API.anthropic.com:443/", anthropic_api_key=key)
    )
    assert one == deployment_of(
        Settings(anthropic_base_url="https://api.anthropic.com", anthropic_api_key=key)
    )
    assert one.id.startswith("https://api.anthropic.com#") and key not in one.id
    assert one.adopts_legacy and not one.simulated
    assert key not in one.slug and "/" not in one.slug
    rotated = deployment_of(Settings(anthropic_api_key=key + "2"))
    assert rotated != one  # a new key is a new deployment...
    kept = Settings(anthropic_api_key=key + "2", deployment_id="team-a")
    assert (
        deployment_of(kept).id == deployment_of(kept.replace(anthropic_api_key=key)).id == "team-a"
    )
    # ... serve --simulate is one deployment whatever port its simulator took, never a real one
    sims = [
        deployment_of(
            Settings(
                anthropic_base_url=f"http://127.0.0.1:{port}", deployment_id=simulated_id(None)
            )
        )
        for port in (40001, 40002)
    ]
    assert sims[0] == sims[1] and sims[0].simulated and not sims[0].adopts_legacy
    assert deployment_of(Settings(deployment_id=simulated_id("team-a"))).id == "simulated-team-a"


async def test_two_deployments_on_one_file_see_only_their_own_responses(tmp_path: Path) -> None:
    mine = SQLiteResponseStore(tmp_path, deployment=REAL)
    theirs = SQLiteResponseStore(tmp_path, deployment=OTHER)
    try:
        await mine.put(record("resp_1", owner=""))
        other = record("resp_2", owner="")  # the same item ids, the same (keyless) owner
        await theirs.put(
            type(other)(
                **{**other.__dict__, "input_items": [{"id": "in_resp_1", "type": "message"}]}
            )
        )
        assert await theirs.get("resp_1", "", NOW) is None
        assert await theirs.chain("resp_1", "", NOW) is None
        assert not await theirs.delete("resp_1", "")
        assert (await mine.find_items(["in_resp_1"], "", NOW))["in_resp_1"]["role"] == "user"
        assert "role" not in (await theirs.find_items(["in_resp_1"], "", NOW))["in_resp_1"]
        page = await theirs.input_items("resp_1", "", NOW, limit=20, order="asc")
        assert page is None
        assert await theirs.purge_expired(NOW + 365 * 86_400) == 1  # its own only
        assert await mine.get("resp_1", "", NOW) is not None
    finally:
        await mine.aclose()
        await theirs.aclose()


_OLD_SCHEMA = """
CREATE TABLE responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL, previous_id TEXT,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, response TEXT NOT NULL,
    input_items TEXT NOT NULL);
CREATE TABLE items (owner TEXT NOT NULL, id TEXT NOT NULL, response_id TEXT NOT NULL,
    PRIMARY KEY (owner, id)) WITHOUT ROWID;
"""


async def test_an_older_data_directory_is_adopted_by_the_first_real_deployment_only(
    tmp_path: Path,
) -> None:
    """Rows stored before deployments existed: a simulated gateway never takes them; the
    first real one does, and another real one then sees nothing of them."""
    db = sqlite3.connect(tmp_path / "responses.sqlite3")
    db.executescript(_OLD_SCHEMA)
    db.execute(
        "INSERT INTO responses VALUES ('resp_old', '', NULL, ?, ?, ?, ?)",
        (NOW, NOW + 86_400, '{"output":[{"id":"out_old"}]}', '[{"id":"in_old"}]'),
    )
    db.execute("INSERT INTO items VALUES ('', 'in_old', 'resp_old')")
    db.commit()
    db.close()
    for deployment, sees in ((SIMULATED, False), (REAL, True), (OTHER, False), (REAL, True)):
        store = SQLiteResponseStore(tmp_path, deployment=deployment)
        try:
            assert (await store.get("resp_old", "", NOW) is not None) is sees, deployment
            assert bool(await store.find_items(["in_old"], "", NOW)) is sees, deployment
        finally:
            await store.aclose()
    db = sqlite3.connect(tmp_path / "responses.sqlite3")
    assert db.execute("SELECT deployment FROM items").fetchall() == [(REAL.id,)]
    db.close()


async def test_every_file_is_0600_and_every_directory_0700_whatever_the_umask(
    tmp_path: Path,
) -> None:
    data = tmp_path / "state" / "data"
    with umask(0):
        responses = SQLiteResponseStore(data)
        files = SQLiteFileStore(data)
        batches = SQLiteBatchStore(data, files)
        spend = SQLiteSpendStore(data)
        try:
            await responses.put(record("resp_1"))
            async with files.write_file("alice", "in.jsonl", BATCH_INPUT) as sink:
                await sink.write(b"{}\n")
            await batches.unfinished()
            await spend.add("alice", 1.0, NOW)
            created = sorted(p.name for p in data.rglob("*"))
            assert {"responses.sqlite3-wal", "responses.sqlite3-shm", "files"} <= set(created)
            for path in (data, *data.rglob("*")):
                assert mode(path) == (0o700 if path.is_dir() else 0o600), path
        finally:
            await responses.aclose()
            await batches.aclose()
            await files.aclose()
            await spend.aclose()


def test_the_default_directory_is_tightened_and_a_configured_one_reported(
    tmp_path: Path,
) -> None:
    default, configured = tmp_path / "default", tmp_path / "configured"
    for path in (default, configured):
        path.mkdir()
        path.chmod(0o755)  # what an older version made
    assert check_data_dir(default, default=True) is None
    assert mode(default) == 0o700
    warning = check_data_dir(configured, default=False)
    assert warning is not None and "chmod 700" in warning and str(configured) in warning
    assert mode(configured) == 0o755  # not ours to change
    fresh = tmp_path / "new" / "dir"
    assert check_data_dir(fresh, default=False) is None and mode(fresh) == 0o700
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(NotADirectoryError):
        check_data_dir(blocked, default=False)


def _reference_page(
    items: list[dict[str, Any]], limit: int, order: str, after: str | None, before: str | None
) -> tuple[list[dict[str, Any]], bool] | str:
    """The page as the route cut it from the whole list in Python, before SQLite did."""
    ordered = items if order == "asc" else items[::-1]
    ids = [item.get("id") for item in ordered]
    start, end = 0, len(ordered)
    for cursor, name in ((after, "after"), (before, "before")):
        if cursor is not None and cursor not in ids:
            return name
    if after is not None:
        start = ids.index(after) + 1
    if before is not None:
        end = ids.index(before)
    window = ordered[start:end]
    if before is not None and after is None:
        return window[-limit:], len(window) > limit
    return window[:limit], len(window) > limit


async def test_input_items_pages_match_the_whole_list_cut_in_python(tmp_path: Path) -> None:
    """Every order, limit and pair of cursors over a three-turn conversation (repeated ids,
    a turn without output, an item without an id): the page SQLite cuts is the one Python
    cut from the whole list; then a lost ancestor leaves the last turn's own input."""
    store = SQLiteResponseStore(tmp_path, deployment=REAL)
    turns = [
        ("resp_a", None, ["a1", "a2"], ["oa1"]),
        ("resp_b", "resp_a", ["b1", "dup", "dup"], []),
        ("resp_c", "resp_b", ["c1", None, "c3"], ["oc1"]),
    ]
    try:
        for rid, previous, inputs, outputs in turns:
            await store.put(
                StoredResponse(
                    id=rid,
                    owner="",
                    created_at=NOW,
                    expires_at=NOW + 86_400,
                    previous_id=previous,
                    response={"id": rid, "output": [{"id": o, "type": "message"} for o in outputs]},
                    input_items=[
                        {"type": "message", "text": 'é\\"', **({"id": i} if i else {})}
                        for i in inputs
                    ],
                )
            )
        whole = [
            *[{"id": i} for i in ("a1", "a2", "oa1", "b1", "dup", "dup")],
            {"id": "c1"},
            {},
            {"id": "c3"},
        ]
        cursors = [None, "a1", "oa1", "dup", "c3", "nope"]
        for order in ("asc", "desc"):
            for limit in (1, 2, 4, 20):
                for after in cursors:
                    for before in cursors:
                        want = _reference_page(whole, limit, order, after, before)
                        try:
                            got = await store.input_items(
                                "resp_c",
                                "",
                                NOW,
                                limit=limit,
                                order=order,
                                after=after,
                                before=before,
                            )
                        except UnknownCursor as exc:
                            assert want == exc.param
                            continue
                        assert got is not None and not isinstance(want, str)
                        data = [json.loads(text) for text in got.items]
                        assert [d.get("id") for d in data] == [w.get("id") for w in want[0]]
                        assert got.has_more is want[1]
                        assert got.first_id == (want[0][0].get("id") if want[0] else None)
                        assert got.last_id == (want[0][-1].get("id") if want[0] else None)
        page = await store.input_items("resp_c", "", NOW, limit=1, order="asc")
        assert page is not None and json.loads(page.items[0])["text"] == 'é\\"'
        assert await store.delete("resp_a", "")
        broken = await store.input_items("resp_c", "", NOW, limit=20, order="asc")
        assert broken is not None and broken.first_id == "c1" and broken.last_id == "c3"
        assert len(broken.items) == 3
        assert await store.input_items("resp_x", "", NOW, limit=20, order="asc") is None
    finally:
        await store.aclose()


async def test_a_deployment_polls_counts_and_purges_only_its_own_batches(tmp_path: Path) -> None:
    files = SQLiteFileStore(tmp_path, deployment=REAL)
    mine = SQLiteBatchStore(tmp_path, files, deployment=REAL)
    theirs = SQLiteBatchStore(tmp_path, files, deployment=OTHER)
    try:
        running = await theirs.create(
            "", new_batch("file-x", "/v1/chat/completions", None, None, 1)
        )
        ended = await theirs.create(
            "",
            {
                **new_batch("file-y", "/v1/chat/completions", None, None, 1),
                "status": "failed",
                "failed_at": 1,
            },
        )
        assert await mine.unfinished() == [] and await mine.status_counts() == {}
        assert await mine.get("", running.id) is None
        assert (await mine.list("")).data == []
        assert await mine.purge_finished(NOW, 0) == 0
        assert await mine.others_unfinished() == {OTHER.id: 1}
        assert [r.id for r in await theirs.unfinished()] == [running.id]
        assert await theirs.purge_finished(NOW, 0) == 1
        assert await theirs.get("", ended.id) is None
    finally:
        await mine.aclose()
        await theirs.aclose()
        await files.aclose()
