"""Where embedded state lives, and keeping it private to the user who runs the gateway.

The default directory is the XDG base directory (``$XDG_DATA_HOME/trio-batcher``, else
``~/.local/share/trio-batcher``): per user, outside any checkout, and the same for every
process of that user, so ``serve --workers N`` shares one store (and so do two different
gateways of that user: ``store.deployment`` keeps their state apart). Created on first use,
not at import.

It holds stored conversations and batch files, so nobody else may read it: the directory
(and every directory under it) is created mode 0700 and every file 0600, whatever the
umask (``private_dir``, ``open_private``). An existing directory is not ours to change
unless it is the default one, which only trio-batcher creates: that one is tightened to
0700; a configured ``DATA_DIR`` open to others is reported at startup (``check_data_dir``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "check_data_dir",
    "open_private",
    "private_dir",
    "resolve_data_dir",
    "tighten",
]

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600


def resolve_data_dir(configured: str | None) -> Path:
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "trio-batcher"


def private_dir(path: Path, levels: int = 1) -> None:
    """``path`` as a directory: its last ``levels`` components (the data directory and
    those under it that are ours) created mode 0700 when missing, the parents above them
    in the usual way; existing ones are left as they are (blocking: run it in a thread)."""
    if path.is_dir():
        return
    if levels > 1:
        private_dir(path.parent, levels - 1)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:  # another process made it meanwhile, or it is a file
        if not path.is_dir():
            raise NotADirectoryError(f"not a directory: {path}") from None
        return
    os.chmod(path, DIR_MODE)  # the umask may have taken bits away that the owner needs


def open_private(path: Path, flags: int) -> int:
    """``os.open`` that creates a file mode 0600 whatever the umask, and takes group and
    other permissions off an existing one (a file of an older version, made 0644)."""
    fd = os.open(path, flags | os.O_CLOEXEC, FILE_MODE)
    try:
        tighten(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def tighten(file: int | Path) -> None:
    """Mode 0600 for a file of ours (a descriptor or a path that may not exist)."""
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        return
    if stat.S_IMODE(mode) != FILE_MODE:
        if isinstance(file, int):
            os.fchmod(file, FILE_MODE)
        else:
            os.chmod(file, FILE_MODE)


def check_data_dir(path: Path, *, default: bool) -> str | None:
    """At startup: a warning to log when others may read ``path``, else None. The default
    directory is tightened instead (only trio-batcher makes it); it is created here when
    missing, since the poller's lock lives in it (blocking: run it in a thread)."""
    private_dir(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & 0o077:
        return None
    if default:
        os.chmod(path, mode & ~0o077)
        return None
    return (
        f"DATA_DIR {path} is readable by other users (mode {mode:03o}); it holds stored "
        f"conversations and batch files: chmod 700 it"
    )
