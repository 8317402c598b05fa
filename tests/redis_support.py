"""A real ``redis-server`` for the cluster tests: started on a free loopback port, stopped after.

Persistence is off (``--save "" --appendonly no``) and the server runs in a temporary
directory, so a test run leaves nothing behind. ``RedisServer.stop()`` / ``start()`` take the
same server down and up again on the same port, for the outage tests.

Without ``redis-server`` on ``PATH`` the tests that ask for it skip, saying how to install it;
``TRIO_BATCHER_REQUIRE_REDIS=1`` (CI sets it) turns the skip into a failure, so a CI image
that lost the package cannot pass silently.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from trio_batcher.cluster import ClusterConfig, RedisLink, open_link

__all__ = [
    "RedisServer",
    "open_test_link",
    "require_redis_server",
    "running_redis",
    "unique_prefix",
]

INSTALL_HINT = (
    "redis-server is not installed: `apt-get install redis-server` (Debian/Ubuntu) "
    "to run the cluster tests; TRIO_BATCHER_REQUIRE_REDIS=1 makes this a failure"
)


def require_redis_server() -> str:
    """The ``redis-server`` binary, or skip (fail under ``TRIO_BATCHER_REQUIRE_REDIS=1``)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("TRIO_BATCHER_REQUIRE_REDIS") == "1":
            pytest.fail(INSTALL_HINT)
        pytest.skip(INSTALL_HINT)
    return binary


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on a fixed loopback port; restartable on that port."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self._binary = binary
        self._workdir = workdir
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, *, timeout: float = 10.0) -> None:
        """Start the server and return once it answers PING (bounded by ``timeout``)."""
        assert not self.running, "already running"
        log = self._workdir / "redis.log"
        self._process = subprocess.Popen(
            [
                self._binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--dir",
                str(self._workdir),
                "--logfile",
                str(log),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        give_up = time.monotonic() + timeout
        while not _answers_ping(self.port):
            if self._process.poll() is not None:
                text = log.read_text(errors="replace") if log.exists() else ""
                raise RuntimeError(f"redis-server exited ({self._process.returncode}): {text}")
            if time.monotonic() > give_up:
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING within {timeout} s")
            time.sleep(0.005)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s); a no-op when it is not running."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)  # a paused server would not see SIGTERM
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing (a hung Redis)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause``: the server answers what it was sent meanwhile."""
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    async def astop(self) -> None:
        """``stop()`` from a trio task, without blocking the other tasks."""
        await trio.to_thread.run_sync(self.stop)

    async def astart(self) -> None:
        """``start()`` from a trio task, without blocking the other tasks."""
        await trio.to_thread.run_sync(self.start)


@contextlib.contextmanager
def running_redis() -> Iterator[RedisServer]:
    """A started ``RedisServer`` in a temporary directory; stopped (and the directory removed)
    on exit. Skips the test when ``redis-server`` is missing (see ``require_redis_server``)."""
    binary = require_redis_server()
    with tempfile.TemporaryDirectory(prefix="trio-batcher-redis-") as workdir:
        server = RedisServer(binary, Path(workdir))
        server.start()
        try:
            yield server
        finally:
            server.stop()


def unique_prefix() -> str:
    """A key prefix of its own, so tests sharing one server never see each other's keys."""
    return f"test-{secrets.token_hex(4)}"


@contextlib.asynccontextmanager
async def open_test_link(
    url: str, prefix: str, *, command_timeout_s: float = 0.5
) -> AsyncIterator[RedisLink]:
    """``open_link`` for a test: its own client (so two calls are two "instances")."""
    async with open_link(
        ClusterConfig(url=url, prefix=prefix, command_timeout_s=command_timeout_s)
    ) as link:
        yield link
