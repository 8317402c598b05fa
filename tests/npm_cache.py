"""Installing an npm-packaged client (Claude Code, Codex CLI) once, into ``tests/.cache``.

Shared by the support modules of the tests that drive real agent CLIs: ``npm install``
into a staging directory under a lock, renamed into place only once it is whole, so that
an interrupted install is never mistaken for a finished one and two test runs never
install at the same time.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, Protocol, TypeVar

__all__ = ["INSTALL_TIMEOUT_S", "NpmUnavailable", "first_working", "npm_install"]

T = TypeVar("T")

INSTALL_TIMEOUT_S: Final = 600


class NpmUnavailable(Exception):
    """The package cannot be installed here (the message says why)."""


class _Versioned(Protocol):
    version: str


V = TypeVar("V", bound=_Versioned)


def first_working(
    launchers: Sequence[tuple[str, ...]],
    check: Callable[[tuple[str, ...], str], V],
    version: str,
    source: str,
) -> V | None:
    """The first launcher that exists, runs (``check``) and is ``version``; else None."""
    for command in launchers:
        if not Path(command[-1]).exists():
            continue
        try:
            found = check(command, source)
        except NpmUnavailable:
            continue
        if found.version == version:
            return found
    return None


def npm_install(
    npm: str,
    package: str,
    cache_dir: Path,
    *,
    cached: Callable[[], T | None],
    launchers: Callable[[Path], Sequence[Sequence[str]]],
    timeout_s: float = INSTALL_TIMEOUT_S,
) -> T:
    """``npm install package`` into ``cache_dir``; returns ``cached()`` once it works."""
    parent = cache_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    # Keep hundreds of MB of node_modules out of git (like .pytest_cache, it ignores itself).
    ignore = parent / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Created by tests/npm_cache.py\n*\n")
    (parent / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    with open(parent / f"{cache_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be installing right now
        found = cached()
        if found is not None:
            return found
        staging = Path(tempfile.mkdtemp(prefix=f"{cache_dir.name}.", dir=parent))
        try:
            started = time.monotonic()
            try:
                done = subprocess.run(
                    [npm, "install", "--no-audit", "--no-fund", "--prefix", str(staging), package],
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired as exc:
                raise NpmUnavailable(
                    f"npm install {package} took over {exc.timeout:.0f} s"
                ) from exc
            if done.returncode != 0:
                raise NpmUnavailable(
                    f"npm install {package} failed (exit {done.returncode}): "
                    f"{(done.stdout + done.stderr).strip()[-1500:]}"
                )
            shutil.rmtree(cache_dir, ignore_errors=True)
            staging.chmod(0o755)  # mkdtemp made it private
            staging.rename(cache_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        installed = cached()
        if installed is None:
            commands = " or ".join(" ".join(c) for c in launchers(cache_dir))
            raise NpmUnavailable(f"npm installed {package}, but neither {commands} runs")
        print(
            f"installed {package} in {time.monotonic() - started:.1f} s into {cache_dir}",
            file=sys.stderr,
        )
        return installed
