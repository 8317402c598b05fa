"""A ``redis-server`` for the scenarios that share state: a free loopback port, no persistence.

The bench starts its own Redis, like its own simulator and proxies: ``running_redis`` picks
a free port, runs ``redis-server`` in a temporary directory with persistence off (``--save
""``, ``--appendonly no``), waits until it answers ``PING``, and on the way out -- normal
exit, error or cancellation, in a shielded scope -- stops it (SIGTERM, then SIGKILL after
``STOP_GRACE_S``) and removes the directory. ``RedisServer.stop()`` and ``start()`` take the
same server down and up again on the same port, so the soak can restart it under load; a
restarted server is empty, as a Redis without persistence is after a crash.

No ``redis-server`` on ``PATH``: ``redis_binary()`` is ``None`` and the caller says so
(the ``cluster`` scenario is skipped, the soak runs without shared state).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, final

import trio

from .processes import ServerError, free_port, terminate

__all__ = ["NO_REDIS", "RedisServer", "parse_commandstats", "redis_binary", "running_redis"]

START_TIMEOUT_S: Final = 10.0
STOP_GRACE_S: Final = 8.0
_POLL_S: Final = 0.01
NO_REDIS: Final = "redis-server is not on PATH (Debian/Ubuntu: apt-get install redis-server)"


def redis_binary() -> str | None:
    """The ``redis-server`` executable on ``PATH``, or ``None``."""
    return shutil.which("redis-server")


async def _answers_ping(port: int) -> bool:
    try:
        with trio.move_on_after(0.5):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(b"PING\r\n")
                return (await stream.receive_some(64)).startswith(b"+PONG")
    except OSError:
        return False
    return False


def parse_commandstats(text: str) -> dict[str, int]:
    """``INFO commandstats`` → calls by command (``cmdstat_evalsha:calls=12,...`` → 12).
    Commands a script runs (``redis.call``) are counted there too, under their own names."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        name, _, fields = line.partition(":")
        if not name.startswith("cmdstat_"):
            continue
        for field in fields.split(","):
            key, _, value = field.partition("=")
            if key == "calls" and value.isdigit():
                calls[name.removeprefix("cmdstat_")] = int(value)
    return calls


async def _command(port: int, command: bytes) -> bytes:
    """One inline command's bulk-string reply (enough for ``INFO``)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(command + b"\r\n")
        data = b""
        while b"\r\n" not in data:
            data += await stream.receive_some(65536) or b"\r\n"
        head, _, data = data.partition(b"\r\n")
        if not head.startswith(b"$"):
            raise ServerError(f"redis-server answered {head[:80]!r} to {command!r}")
        size = int(head[1:])
        while len(data) < size:
            piece = await stream.receive_some(65536)
            if not piece:
                break
            data += piece
        return data[:size]


@final
class RedisServer:
    """One ``redis-server`` on a fixed loopback port, restartable on that port."""

    def __init__(self, binary: str, workdir: Path, log_path: Path) -> None:
        self._binary = binary
        self._workdir = workdir
        self.log_path = log_path.resolve()  # redis-server runs in --dir, not in our cwd
        self.port = free_port()
        self._process: trio.Process | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The running server's pid (a new one after each ``start``), ``None`` when stopped."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    async def start(self) -> None:
        """Start the server and return once it answers ``PING``.

        Raises:
          ServerError: it exited first, or did not answer within ``START_TIMEOUT_S``.
        """
        if self.pid is not None:
            raise ServerError("redis-server is already running")
        argv = [
            self._binary,
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--dir", str(self._workdir), "--logfile", str(self.log_path),
        ]  # fmt: skip
        self._process = process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.starts += 1
        with trio.move_on_after(START_TIMEOUT_S):
            while not await _answers_ping(self.port):
                if process.poll() is not None:
                    raise ServerError(
                        f"redis-server exited with status {process.returncode}:\n{self._tail()}"
                    )
                await trio.sleep(_POLL_S)
            return
        await self.stop()
        raise ServerError(f"redis-server did not answer PING within {START_TIMEOUT_S:g} s")

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_GRACE_S``; a no-op when it is not running."""
        process, self._process = self._process, None
        if process is not None:
            await terminate(process, STOP_GRACE_S)

    async def commandstats(self) -> dict[str, int]:
        """Calls by command since the server started (``INFO commandstats``)."""
        with trio.fail_after(5):
            reply = await _command(self.port, b"INFO commandstats")
        return parse_commandstats(reply.decode(errors="replace"))

    async def clients(self) -> int:
        """Client connections open now, this question's own left out (``INFO clients``)."""
        with trio.fail_after(5):
            reply = (await _command(self.port, b"INFO clients")).decode(errors="replace")
        for line in reply.splitlines():
            if line.startswith("connected_clients:"):
                return int(line.partition(":")[2]) - 1
        raise ServerError("INFO clients has no connected_clients")

    def _tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""


@asynccontextmanager
async def running_redis(binary: str, log_dir: Path) -> AsyncIterator[RedisServer]:
    """A started ``RedisServer`` logging to ``log_dir/redis.log``; stopped on exit whatever
    happened, and its working directory removed.

    Raises:
      ServerError: it did not start.
    """
    await trio.Path(log_dir).mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="trio-batcher-bench-redis-"))
    server = RedisServer(binary, workdir, log_dir / "redis.log")
    try:
        await server.start()
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await server.stop()
            await trio.to_thread.run_sync(lambda: shutil.rmtree(workdir, ignore_errors=True))
