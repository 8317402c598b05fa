"""The ownership table of Anthropic's stateful objects: each owner sees only its own, in
its own deployment, and a restart keeps who owns what."""

from __future__ import annotations

from pathlib import Path

from trio_batcher.store.deployment import Deployment
from trio_batcher.store.owned import OwnedObjects


async def test_an_object_is_its_owners_alone_and_survives_a_restart(tmp_path: Path) -> None:
    clock = iter(range(100))
    objects = OwnedObjects(tmp_path, clock=lambda: float(next(clock)))
    await objects.record("batch", "msgbatch_a", "team-a", "up0", {"model": "m"})
    await objects.record("batch", "msgbatch_b", "team-b", "up1")
    found = await objects.get("batch", "msgbatch_a", "team-a")
    assert found is not None and found.upstream == "up0" and found.meta == {"model": "m"}
    assert await objects.get("batch", "msgbatch_a", "team-b") is None  # another owner's
    assert await objects.get("file", "msgbatch_a", "team-a") is None  # another kind
    await objects.aclose()
    again = OwnedObjects(tmp_path)
    assert (await again.get("batch", "msgbatch_a", "team-a")) is not None
    assert [o.id for o in (await again.page("batch", "team-b")).data] == ["msgbatch_b"]
    await again.forget("batch", "msgbatch_a")
    assert await again.get("batch", "msgbatch_a", "team-a") is None
    await again.aclose()


async def test_pages_are_newest_first_with_before_and_after_cursors(tmp_path: Path) -> None:
    clock = iter(range(100))
    objects = OwnedObjects(tmp_path, clock=lambda: float(next(clock)))
    for n in range(5):
        await objects.record("file", f"file_{n}", "team-a", "up0")
    await objects.record("file", "file_other", "team-b", "up0")
    first = await objects.page("file", "team-a", limit=2)
    assert [o.id for o in first.data] == ["file_4", "file_3"] and first.has_more
    rest = await objects.page("file", "team-a", limit=10, before="file_3")
    assert [o.id for o in rest.data] == ["file_2", "file_1", "file_0"] and not rest.has_more
    newer = await objects.page("file", "team-a", after="file_2")
    assert [o.id for o in newer.data] == ["file_4", "file_3"]
    await objects.aclose()


async def test_two_deployments_sharing_a_directory_never_see_each_other(tmp_path: Path) -> None:
    real = OwnedObjects(tmp_path, deployment=Deployment("https://api.anthropic.com#abc"))
    simulated = OwnedObjects(tmp_path, deployment=Deployment("simulated"))
    await real.record("thread", "msg_1", "team-a", "default")
    assert await simulated.get("thread", "msg_1", "team-a") is None
    assert (await simulated.page("thread", "team-a")).data == []
    await real.aclose()
    await simulated.aclose()


async def test_a_page_after_a_cursor_is_the_one_just_newer_than_it(tmp_path: Path) -> None:
    # Anthropic's before_id pages back towards the newest: the objects just before the
    # cursor in the list, not the newest page (which would skip the ones in between).
    clock = iter(range(100))
    objects = OwnedObjects(tmp_path, clock=lambda: float(next(clock)))
    for n in range(6):
        await objects.record("batch", f"b{n}", "team-a", "up0")
    back = await objects.page("batch", "team-a", limit=2, after="b1")
    assert [o.id for o in back.data] == ["b3", "b2"] and back.has_more
    last = await objects.page("batch", "team-a", limit=2, after="b3")
    assert [o.id for o in last.data] == ["b5", "b4"] and not last.has_more
    await objects.aclose()
