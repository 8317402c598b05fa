"""A ``redis-server`` for the scenarios that share state: a free loopback port, no persistence.

The bench starts its own Redis, like its own simulator and proxies: ``running_redis`` picks
a free port, runs ``redis-server`` in a temporary directory with persistence off (``--save
""``, ``--appendonly no``), waits until it answers ``PING``, and on the way out -- normal
exit, error or cancellation, in a shielded scope -- stops it (SIGTERM, then SIGKILL after
``STOP_GRACE_S``) and removes the directory. ``RedisServer.stop()`` and ``start()`` take the
same server down and up again on the same port, so the soak can restart it under load; a
restarted server is empty, as a Redis without persistence is after a crash.

``RedisServer.query`` sends one command in RESP and parses its reply (``encode_command``,
``parse_reply``: enough of RESP2 for ``HGETALL`` and ``ZCARD``), so the ``cluster`` scenario
can read the lease blocks the proxies left in Redis without a client library.

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
from typing import Final, TypeAlias, final

import trio

from .processes import ServerError, free_port, terminate

__all__ = [
    "NO_REDIS",
    "IncompleteReply",
    "RedisServer",
    "Reply",
    "encode_command",
    "hash_of",
    "parse_commandstats",
    "parse_reply",
    "redis_binary",
    "running_redis",
]

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


# A RESP2 reply: simple and bulk strings (decoded), integers, nil, arrays of those.
Reply: TypeAlias = str | int | list["Reply"] | None


class IncompleteReply(Exception):
    """The bytes so far end before the reply does: read more."""


def encode_command(*args: str) -> bytes:
    """One command as a RESP array of bulk strings (any key, braces and spaces included)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def parse_reply(data: bytes, at: int = 0) -> tuple[Reply, int]:
    """The RESP2 reply that starts at ``data[at]``, and the offset just past it.

    Raises:
      IncompleteReply: ``data`` ends before the reply does.
      ServerError: Redis answered an error (``-ERR ...``).
    """
    end = data.find(b"\r\n", at)
    if end < 0:
        raise IncompleteReply
    kind, line, after = data[at : at + 1], data[at + 1 : end].decode(errors="replace"), end + 2
    if kind == b"+":
        return line, after
    if kind == b"-":
        raise ServerError(f"redis-server answered an error: {line[:200]}")
    if kind == b":":
        return int(line), after
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, after
        if len(data) < after + size + 2:
            raise IncompleteReply
        return data[after : after + size].decode(errors="replace"), after + size + 2
    if kind == b"*":
        count = int(line)
        if count < 0:
            return None, after
        items: list[Reply] = []
        for _ in range(count):
            item, after = parse_reply(data, after)
            items.append(item)
        return items, after
    raise ServerError(f"not a RESP reply: {data[at : at + 80]!r}")


def hash_of(reply: Reply) -> dict[str, str]:
    """``HGETALL``'s flat ``[field, value, ...]`` as a dict."""
    if not isinstance(reply, list) or len(reply) % 2:
        raise ServerError(f"not a HGETALL reply: {reply!r:.200}")
    return {str(reply[i]): str(reply[i + 1]) for i in range(0, len(reply), 2)}


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

    async def query(self, *args: str) -> Reply:
        """One command, on a connection of its own, and its parsed reply.

        Raises:
          ServerError: Redis answered an error, or closed the connection mid-reply.
        """
        with trio.fail_after(5):
            stream = await trio.open_tcp_stream("127.0.0.1", self.port)
            async with stream:
                await stream.send_all(encode_command(*args))
                data = b""
                while True:
                    try:
                        return parse_reply(data)[0]
                    except IncompleteReply:
                        piece = await stream.receive_some(65536)
                        if not piece:
                            raise ServerError(
                                f"redis-server closed mid-reply to {args[0]}"
                            ) from None
                        data += piece

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
