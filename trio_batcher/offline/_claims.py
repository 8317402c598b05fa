"""Which process steps a batch now: an ``flock`` per batch in the deployment's work directory.

Theory of operation. Every process of a deployment sharing ``DATA_DIR`` (``serve --workers
N``, two instances on one host) runs a poller, and they share the batches: before a step
a poller takes the batch's claim, ``<work_dir>/<batch id>.claim`` locked ``LOCK_EX |
LOCK_NB``; a claim held elsewhere means another poller is stepping that batch, so this one
passes it by until its next round. The lock is held for the whole step (a delivery of
minutes included) and dropped after it -- or by the kernel when its holder dies, so a
crashed worker's batches are free at once, with no expiry to wait out or to renew during
a long delivery. ``flock`` locks belong to an open file description, so two pollers in
one process exclude each other as two processes do.

A claim file is removed by its holder before it lets go, so none outlives a step. That
opens the classic race (a taker opens the file, the holder unlinks it and unlocks, the
taker locks an inode no other taker will ever open again); ``take`` closes that by
checking, once locked, that the path still names the inode it holds, and opening again if
not.

Spool files (``<batch id>.body``, ``.results``) are written only under the batch's claim,
so ``sweep`` removes those of a step nobody is running (a crashed process's) by taking
their claim first; another process's step in flight keeps its files.

``poller.lock``, which a version before these claims took exclusively to elect one poller
for everything, is held *shared* by every poller now (``join``): while an older process
leads, newer ones wait for it to go, and while any newer one runs, an older one never
leads -- so a rolling upgrade never has an old leader and new claimers step one batch at
once. All of this is blocking file I/O: run it in a thread.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Final, final

from ..store.data_dir import open_private, private_dir
from ._records import WORK_LEVELS, clear_spools

__all__ = ["CLAIM_SUFFIX", "MEMBERS_LOCK", "Claims", "clear_legacy_spools"]

MEMBERS_LOCK: Final = "poller.lock"
CLAIM_SUFFIX: Final = ".claim"
_SPOOL_SUFFIXES: Final = (".body", ".results")


@final
class Claims:
    """The claims of the batches of one work directory (``DATA_DIR/batch-work/<deployment>``)."""

    def __init__(self, work_dir: Path) -> None:
        self._work_dir = work_dir

    def join(self) -> int:
        """``poller.lock`` held shared; its descriptor (close it to leave). Raises
        ``BlockingIOError`` while a poller of an older version holds it exclusively, and
        ``OSError`` when the work directory cannot be made or written."""
        private_dir(self._work_dir, WORK_LEVELS)
        fd = open_private(self._work_dir / MEMBERS_LOCK, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def take(self, batch_id: str) -> int | None:
        """The batch's claim, or None when another poller holds it; ``release`` it after."""
        path = self._path(batch_id)
        private_dir(self._work_dir, WORK_LEVELS)  # a stat, unless it was removed
        while True:
            fd = open_private(path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except BaseException:
                os.close(fd)
                raise
            if _names(path, fd):
                return fd
            os.close(fd)  # its holder removed it meanwhile: claim the file there now

    def release(self, batch_id: str, fd: int) -> None:
        """Let go of a claim ``take`` returned; the file goes first, while still held."""
        try:
            self._path(batch_id).unlink(missing_ok=True)
        finally:
            os.close(fd)

    def sweep(self) -> None:
        """Remove the spool and claim files of steps that are not running (a crashed
        process's); a step in flight in another process keeps its own."""
        if not self._work_dir.is_dir():
            return
        ids = {
            path.name.rsplit(".", 1)[0]
            for suffix in (*_SPOOL_SUFFIXES, CLAIM_SUFFIX)
            for path in self._work_dir.glob(f"*{suffix}")
        }
        for batch_id in sorted(ids):
            fd = self.take(batch_id)
            if fd is None:
                continue
            try:
                for suffix in _SPOOL_SUFFIXES:
                    (self._work_dir / f"{batch_id}{suffix}").unlink(missing_ok=True)
            finally:
                self.release(batch_id, fd)

    def _path(self, batch_id: str) -> Path:
        return self._work_dir / f"{batch_id}{CLAIM_SUFFIX}"


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` is still the file open as ``fd``."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)


def clear_legacy_spools(legacy_dir: Path) -> None:
    """Spool files a poller of a version before deployments left in ``legacy_dir``, removed
    if no such poller holds its lock now."""
    if not legacy_dir.is_dir():
        return
    fd = open_private(legacy_dir / MEMBERS_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # an older gateway still polls there: its files are its own
        clear_spools(legacy_dir)
    finally:
        os.close(fd)
