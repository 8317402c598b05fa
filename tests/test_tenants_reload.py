"""The tenants file reloaded while serving, on trio's virtual clock: a change is in force
at the next poll, SIGHUP reloads at once, a bad or missing file leaves the previous tenants
in force (logged once), and requests keep the tenant they looked up."""

from __future__ import annotations

import logging
import math
import os
import signal
from pathlib import Path

import pytest
import trio
import trio.testing

from trio_batcher.tenants import TenantDirectory, TenantsFileError, TenantsWatcher, hash_key

KEY = "tb-reload-test-key"
ONE = f'[[tenant]]\nname = "one"\nkey_sha256 = ["{hash_key(KEY)}"]\n'
TWO = ONE + '[[tenant]]\nname = "two"\nrpm = 5\n'


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class Reloads:
    """Records when each new directory came into force (virtual time)."""

    def __init__(self) -> None:
        self.at: list[tuple[float, tuple[str, ...]]] = []
        self.event = trio.Event()

    def __call__(self, directory: TenantDirectory) -> None:
        self.at.append((trio.current_time(), directory.names()))
        self.event.set()

    async def next(self) -> None:
        await self.event.wait()
        self.event = trio.Event()


_version = 0


def write(path: Path, text: str) -> None:
    """Replace the file as editors and ``keys add`` do, with a modification time of its own
    (so two writes within the file system's timestamp granularity still differ)."""
    global _version
    _version += 1
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.utime(temporary, ns=(_version * 10**9, _version * 10**9))
    os.replace(temporary, path)


def rewrite_in_place(path: Path, text: str) -> None:
    """Write into the same inode and put the modification time back: only the size says."""
    st = path.stat()
    with path.open("w") as out:
        out.write(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def tenants_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    write(path, ONE)
    return path


async def test_a_changed_file_is_in_force_at_the_next_poll(
    autojump_clock: trio.testing.MockClock, tenants_file: Path
) -> None:
    reloads = Reloads()
    watcher = TenantsWatcher(tenants_file, on_reload=reloads)
    assert watcher.directory.names() == ("one",)
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.run)
        await trio.sleep(0.25)
        write(tenants_file, TWO)
        await reloads.next()
        assert reloads.at == [(1.0, ("one", "two"))]
        assert watcher.directory.names() == ("one", "two")
        await trio.sleep(10)  # nothing changed since: no more reloads
        assert watcher.statistics().reloads == 1
        nursery.cancel_scope.cancel()


async def test_a_file_written_in_place_is_noticed_by_its_size(
    autojump_clock: trio.testing.MockClock, tenants_file: Path
) -> None:
    reloads = Reloads()
    watcher = TenantsWatcher(tenants_file, on_reload=reloads)
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.run)
        await trio.sleep(2.5)
        rewrite_in_place(tenants_file, TWO)
        await reloads.next()
        assert reloads.at == [(3.0, ("one", "two"))]
        nursery.cancel_scope.cancel()


async def test_a_bad_file_is_refused_once_and_the_previous_tenants_stay(
    autojump_clock: trio.testing.MockClock, tenants_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reloads = Reloads()
    watcher = TenantsWatcher(tenants_file, on_reload=reloads)
    before = watcher.directory
    kept = before.lookup(KEY)
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.run)
        with caplog.at_level(logging.ERROR, logger="trio_batcher"):
            write(tenants_file, ONE + '[[tenant]]\nname = "two"\nrpm = 0\n')
            await trio.sleep(5.5)
        assert watcher.directory is before
        stats = watcher.statistics()
        assert (stats.reloads, stats.refused) == (0, 1)
        assert (
            stats.last_error is not None and "tenant 'two': rpm: must be >= 1" in stats.last_error
        )
        refusals = [r.getMessage() for r in caplog.records]
        assert len(refusals) == 1
        assert refusals[0].startswith("tenants file refused, the previous tenants stay in force")
        assert "tenant 'two': rpm: must be >= 1, got 0" in refusals[0]
        write(tenants_file, TWO)
        await reloads.next()
        assert reloads.at == [(6.0, ("one", "two"))]
        assert watcher.statistics().last_error is None
        nursery.cancel_scope.cancel()
    assert kept is not None and kept.name == "one"  # a looked-up tenant is never changed


async def test_a_deleted_file_leaves_the_tenants_in_force_until_it_returns(
    autojump_clock: trio.testing.MockClock, tenants_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reloads = Reloads()
    watcher = TenantsWatcher(tenants_file, on_reload=reloads)
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.run)
        with caplog.at_level(logging.ERROR, logger="trio_batcher"):
            os.unlink(tenants_file)
            await trio.sleep(4.5)
        assert [r.getMessage() for r in caplog.records] == [
            f"tenants file {tenants_file} is gone; the previous tenants stay in force"
        ]
        assert watcher.directory.names() == ("one",)
        assert watcher.directory.lookup(KEY) is not None
        write(tenants_file, TWO)
        await reloads.next()
        assert reloads.at == [(5.0, ("one", "two"))]
        nursery.cancel_scope.cancel()


async def test_sighup_reloads_at_once(
    autojump_clock: trio.testing.MockClock, tenants_file: Path
) -> None:
    reloads = Reloads()
    watcher = TenantsWatcher(tenants_file, poll_interval_s=math.inf, on_reload=reloads)
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.run)
        assert watcher.statistics().signals  # installed before start() returned
        await trio.sleep(100)
        write(tenants_file, TWO)
        await trio.sleep(100)
        assert watcher.directory.names() == ("one",)  # no polling: nothing yet
        os.kill(os.getpid(), signal.SIGHUP)
        await reloads.next()
        assert reloads.at == [(200.0, ("one", "two"))]
        os.kill(os.getpid(), signal.SIGHUP)  # even unchanged, a SIGHUP reloads
        await reloads.next()
        assert [names for _, names in reloads.at] == [("one", "two")] * 2
        nursery.cancel_scope.cancel()
    assert not watcher.statistics().signals


async def test_without_a_file_there_is_nothing_to_watch() -> None:
    watcher = TenantsWatcher(None, proxy_api_keys=["pk-1"])
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.run)  # returns: no task is left behind
    assert not watcher.reload()
    tenant = watcher.directory.lookup("pk-1")
    assert tenant is not None and tenant.origin == "proxy_api_keys"


async def test_a_reload_keeps_the_proxy_api_keys_tenants_without_keeping_the_keys(
    tenants_file: Path,
) -> None:
    watcher = TenantsWatcher(tenants_file, proxy_api_keys=["pk-secret"])
    write(tenants_file, TWO)
    assert watcher.reload()
    assert watcher.directory.lookup("pk-secret") is not None
    assert "pk-secret" not in repr(vars(watcher)) + repr(watcher.statistics())


def test_a_bad_file_at_startup_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text("[[tenant]]\nweight = 2\n")
    with pytest.raises(TenantsFileError, match="tenant #1: name is required"):
        TenantsWatcher(path)
