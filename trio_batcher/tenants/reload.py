"""Reloading the tenants file while serving: on SIGHUP, or when the file changes.

Theory of operation
-------------------
``TenantsWatcher`` owns the directory in force. It is loaded once in ``__init__`` (a bad
file there is a startup error: ``TenantsFileError``, which ``Settings.check`` already
reports as ``TENANTS_FILE``), and replaced by ``reload()``: the file is read and validated
whole, a new ``TenantDirectory`` is built, and the one reference is reassigned. That
assignment is the swap: trio runs one task at a time and ``reload`` never awaits, so every
reader sees the old directory or the new one, never a mixture. Requests already admitted
keep the ``Tenant`` they looked up and finish under it; only new requests see the change.
A refused file (syntax, validation, unreadable, deleted) is logged with every problem and
the previous directory stays in force; each refused version is logged once, not every poll.

``run()`` belongs in the app's lifetime nursery (``nursery.start(watcher.run)``) and
returns only when cancelled. Two children:

- a poll every ``poll_interval_s`` (1 s) of the file's ``stat``: a change of inode, device,
  size or modification time (ns) triggers a reload. Editors and ``keys add`` that replace
  the file (``os.replace``) change the inode; an in-place write changes size or time. The
  signature is taken *before* the read, so a write that lands during the read is seen at
  the next poll. Two writes of the same size within the file system's timestamp
  granularity onto a reused inode can look alike: SIGHUP is the sure way.
- SIGHUP (``trio.open_signal_receiver``): an explicit reload, even if the file looks the
  same. Signals can only be received on the main thread of a POSIX process; elsewhere
  (a test runner's thread, Windows) the watcher only polls, and says so in the log.
  While ``run`` is running SIGHUP no longer terminates the process; when it returns, the
  receiver puts back the disposition it found. ``trio-batcher serve`` ignores SIGHUP from
  its entry point on, so before and after ``run`` (and without a file) it ends nothing;
  under ``serve --workers`` the supervisor forwards its SIGHUP to every running worker.

``started()`` is reported after the SIGHUP handler is installed, so once
``nursery.start`` returns a SIGHUP is a reload and never the default exit.

The stat and the read are done on the event loop, not in a thread: the file is a few KiB
on a local disk and a stat a second costs microseconds, less than the thread hand-off
would, and it keeps the watcher deterministic under trio's autojump clock.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, final

import trio

from .directory import TenantDirectory, build_directory, proxy_key_digests
from .keys_file import TenantsFileError, read_tenants_file

__all__ = ["TenantsWatcher", "WatcherStatistics"]

log = logging.getLogger("trio_batcher")

POLL_INTERVAL_S: Final = 1.0

_Signature = tuple[int, int, int, int]  # device, inode, size, mtime (ns)


@final
@dataclass(frozen=True)
class WatcherStatistics:
    """Counts since start: reloads that took effect, files refused, and the last refusal."""

    reloads: int
    refused: int
    last_error: str | None
    tenants: int
    signals: bool


@final
class TenantsWatcher:
    """The tenant directory in force, reloaded on SIGHUP or when the file changes.

    Args:
      path: the tenants file, or None (then the directory is ``PROXY_API_KEYS``' tenants
        or ``anonymous``, and ``run`` returns at once: there is nothing to watch).
      proxy_api_keys: ``PROXY_API_KEYS``; hashed at once, only the digests are kept.
      poll_interval_s: seconds between stats (``math.inf``: SIGHUP only).
      on_reload: called with each new directory after it is in force (e.g. to prune
        rate-limit buckets of removed tenants). It must not raise.

    Raises:
      TenantsFileError: the file cannot be used at startup.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        proxy_api_keys: Sequence[str] = (),
        poll_interval_s: float = POLL_INTERVAL_S,
        on_reload: Callable[[TenantDirectory], None] | None = None,
    ) -> None:
        self._path = None if path is None else os.fspath(path)
        self._digests = proxy_key_digests(proxy_api_keys)
        self._poll_interval_s = poll_interval_s
        self._on_reload = on_reload
        self._reloads = 0
        self._refused = 0
        self._last_error: str | None = None
        self._signals = False
        self._signature = self._stat()
        self._directory = self._load()

    @property
    def directory(self) -> TenantDirectory:
        """The directory in force now. Read it per request; don't keep it."""
        return self._directory

    def reload(self) -> bool:
        """Read the file now and put it in force; False (logged) if it is refused."""
        if self._path is None:
            return False
        self._signature = self._stat()
        try:
            directory = self._load()
        except TenantsFileError as exc:
            self._refused += 1
            self._last_error = str(exc)
            log.error("tenants file refused, the previous tenants stay in force: %s", exc)
            return False
        self._directory = directory
        self._reloads += 1
        self._last_error = None
        log.info("tenants file %s reloaded: %d tenants", self._path, len(directory))
        if self._on_reload is not None:
            self._on_reload(directory)
        return True

    def statistics(self) -> WatcherStatistics:
        return WatcherStatistics(
            reloads=self._reloads,
            refused=self._refused,
            last_error=self._last_error,
            tenants=len(self._directory),
            signals=self._signals,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled (see the module's theory of operation)."""
        if self._path is None:
            task_status.started()
            return
        async with trio.open_nursery() as nursery:
            if _can_receive_signals():
                await nursery.start(self._on_sighup)
            else:
                log.info("tenants file %s: no SIGHUP here, reloading on change only", self._path)
            nursery.start_soon(self._poll)
            task_status.started()

    async def _on_sighup(self, *, task_status: trio.TaskStatus[None]) -> None:
        with trio.open_signal_receiver(signal.SIGHUP) as signals:
            self._signals = True
            task_status.started()
            try:
                async for _ in signals:
                    log.info("SIGHUP: reloading the tenants file %s", self._path)
                    self.reload()
            finally:
                self._signals = False

    async def _poll(self) -> None:
        if math.isinf(self._poll_interval_s):
            return
        while True:
            await trio.sleep(self._poll_interval_s)
            signature = self._stat()
            if signature == self._signature:
                continue
            if signature is None:
                self._signature = None
                self._refused += 1
                self._last_error = f"{self._path}: missing"
                log.error("tenants file %s is gone; the previous tenants stay in force", self._path)
                continue
            self.reload()

    def _stat(self) -> _Signature | None:
        if self._path is None:
            return None
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self) -> TenantDirectory:
        tenants = () if self._path is None else read_tenants_file(self._path)
        return build_directory(tenants, self._digests, source=self._path)


def _can_receive_signals() -> bool:
    return hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread()
