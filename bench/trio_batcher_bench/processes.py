"""The simulator and the proxy as separate child processes on loopback, always stopped.

Theory of operation: each server is ``python -m trio_batcher simulate|serve --port P`` with
an environment we control (every proxy setting variable inherited from the caller's shell
is removed first, so a stray ``BATCH_ENABLED`` cannot change a benchmark). Its stdout and
stderr go to a log file, never to a pipe that could fill and block the child.
``running_stack`` picks free ports, spawns every child at once (a proxy needs its upstream
only when a request comes) and polls each one's readiness URL until it answers 200, the
child exits (``ServerError`` with the log's tail) or the start deadline passes.

``running_stack`` owns the children for the length of an ``async with`` block. On the way
out -- normal exit, error or cancellation -- every child still running gets SIGTERM, then
SIGKILL if it has not exited within ``STOP_GRACE_S`` (the proxies together first, then the
simulator); this runs in a shielded cancel scope, so nothing the caller does can skip it.
The proxy's ``SHUTDOWN_GRACE_S`` is set low so SIGTERM finishes quickly: the benchmark has
no request it wants to outlive the run. Each proxy's ``DATA_DIR`` (where stored Responses
go) is its own directory inside a temporary one the stack removes after every child has
stopped, so a benchmark never writes into the user's data directory nor reads an earlier
run's state.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, final

import httpx2
import trio

from trio_batcher.settings import SPECS

__all__ = [
    "SIM_KEY",
    "ProxyServer",
    "ServerError",
    "SimServer",
    "Stack",
    "running_stack",
]

SIM_KEY: Final = "sk-ant-bench-local-simulated"  # the simulator accepts any non-empty key
START_TIMEOUT_S: Final = 20.0
STOP_GRACE_S: Final = 8.0
IDLE_TIMEOUT_S: Final = 10.0
_POLL_S: Final = 0.05
_LOG_TAIL: Final = 2000


@final
class ServerError(RuntimeError):
    """A server process failed to start or answered its control endpoint badly."""


def free_port() -> int:
    """A port nobody listens on right now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class _Child:
    name: str
    process: trio.Process
    log_path: Path
    url: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-_LOG_TAIL:]


@final
@dataclass
class SimServer:
    """A running simulator: its base URL, pid, and its ``/_sim`` control endpoints."""

    child: _Child
    http: httpx2.AsyncClient

    @property
    def url(self) -> str:
        return self.child.url

    @property
    def pid(self) -> int:
        return self.child.pid

    async def stats(self, recent: int = 0) -> dict[str, Any]:
        """``GET /_sim/stats``; ``recent`` traces included (0: none, the cheap poll)."""
        response = await self.http.get(f"{self.url}/_sim/stats", params={"recent": recent})
        return _json_object(response, "simulator /_sim/stats")

    async def reset(self) -> None:
        response = await self.http.post(f"{self.url}/_sim/reset")
        _json_object(response, "simulator /_sim/reset")


@final
@dataclass
class ProxyServer:
    """A running proxy (``METRICS_ENABLED=1``): its base URL, pid, env, ``DATA_DIR`` (a
    temporary directory, gone once the stack has stopped) and ``/metrics`` (asked with the
    proxy's ``METRICS_TOKEN``, if its settings have one)."""

    child: _Child
    http: httpx2.AsyncClient
    env: Mapping[str, str]
    data_dir: Path

    @property
    def url(self) -> str:
        return self.child.url

    @property
    def pid(self) -> int:
        return self.child.pid

    async def metrics(self) -> dict[str, Any]:
        # A proxy with client keys (a TENANTS_FILE) wants a token for /metrics: its
        # METRICS_TOKEN, when the scenario gave it one.
        token = self.env.get("METRICS_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else None
        response = await self.http.get(f"{self.url}/metrics", headers=headers)
        return _json_object(response, "proxy /metrics")

    async def wait_idle(self) -> dict[str, Any]:
        """The ``/metrics`` snapshot once no request is active or waiting and no upstream call
        is in flight, so every request the clients finished has been recorded (a stream is
        recorded after its last byte left, a moment after the client saw it).

        Raises:
          ServerError: still busy after ``IDLE_TIMEOUT_S`` seconds.
        """
        with trio.move_on_after(IDLE_TIMEOUT_S):
            while True:
                snapshot = await self.metrics()
                busy = snapshot["concurrency"]
                if not (busy["active"] or busy["waiting"] or busy["upstream_in_flight"]):
                    return snapshot
                await trio.sleep(0.02)
        raise ServerError(f"proxy still busy {IDLE_TIMEOUT_S:g} s after the load stopped")


@final
@dataclass
class Stack:
    """One simulator, any number of named proxies in front of it, perhaps the floor server."""

    sim: SimServer
    proxies: dict[str, ProxyServer] = field(default_factory=dict)
    floor: _Child | None = None
    canned: _Child | None = None  # ``bench.canned_upstream``, when the proxies use it

    @property
    def upstream_url(self) -> str:
        """What the proxies and the floor server call: the canned upstream or the simulator."""
        return self.canned.url if self.canned is not None else self.sim.url


def _json_object(response: httpx2.Response, what: str) -> dict[str, Any]:
    if response.status_code != 200:
        raise ServerError(f"{what} answered {response.status_code}: {response.text[:200]}")
    data = response.json()
    if not isinstance(data, dict):
        raise ServerError(f"{what} did not answer a JSON object")
    return data


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    for spec in SPECS:
        env.pop(spec.env, None)
    env.pop("PYTHONBREAKPOINT", None)
    return env


async def _spawn(
    name: str,
    argv: list[str],
    env: Mapping[str, str],
    log_dir: Path,
    port: int,
    children: list[_Child],
    module: str = "trio_batcher",
) -> _Child:
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", module, *argv],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    child = _Child(name, process, log_path, f"http://127.0.0.1:{port}")
    children.append(child)  # registered at once: the caller's finally stops it
    return child


async def _wait_ready(child: _Child, ready_path: str, http: httpx2.AsyncClient) -> None:
    """Poll ``ready_path`` until it answers 200.

    Raises:
      ServerError: the child exited first, or ``START_TIMEOUT_S`` passed.
    """
    process = child.process
    with trio.move_on_after(START_TIMEOUT_S):
        while process.poll() is None:
            try:
                response = await http.get(child.url + ready_path, timeout=1.0)
                if response.status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            await trio.sleep(_POLL_S)
        raise ServerError(
            f"{child.name} exited with status {process.returncode} before it was ready:\n"
            f"{child.log_tail()}"
        )
    raise ServerError(f"{child.name} not ready after {START_TIMEOUT_S:g} s:\n{child.log_tail()}")


async def _all_ready(waits: list[tuple[_Child, str]], http: httpx2.AsyncClient) -> None:
    """Wait for every child concurrently; the first failure stops the wait and is raised
    as itself (not inside an ExceptionGroup)."""
    failures: list[ServerError] = []

    async def wait(child: _Child, path: str, scope: trio.CancelScope) -> None:
        try:
            await _wait_ready(child, path, http)
        except ServerError as exc:
            failures.append(exc)
            scope.cancel()

    async with trio.open_nursery() as nursery:
        for child, path in waits:
            nursery.start_soon(wait, child, path, nursery.cancel_scope)
    if failures:
        raise failures[0]


async def _stop(child: _Child) -> None:
    await terminate(child.process)


async def terminate(process: trio.Process, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; a no-op for a process that has exited."""
    if process.poll() is not None:
        return
    try:
        process.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        return
    with trio.move_on_after(grace_s):
        await process.wait()
        return
    process.kill()
    await process.wait()


@asynccontextmanager
async def running_stack(
    sim_args: list[str],
    proxies: Mapping[str, Mapping[str, str]],
    log_dir: Path,
    *,
    floor: bool = False,
    workers: Mapping[str, int] | None = None,
    canned: list[str] | None = None,
) -> AsyncIterator[Stack]:
    """Start a simulator (``simulate`` plus ``sim_args``) and one proxy per entry of
    ``proxies`` (name -> extra settings), each proxy pointed at the simulator with metrics
    on and its own temporary ``DATA_DIR``, and with ``floor`` the stack's floor server
    (``bench.floor``) too, and each proxy named in ``workers`` as ``serve --workers N`` (its
    pid is the supervisor's: meter its tree), and with ``canned`` (its arguments) a
    ``bench.canned_upstream`` that the proxies and the floor call instead of the simulator;
    yield them; stop them all on exit, whatever happened, then remove
    the data directories.

    Raises:
      ServerError: a server did not become ready (its log's tail is in the message).
    """
    await trio.Path(log_dir).mkdir(parents=True, exist_ok=True)
    children: list[_Child] = []
    base = _base_env()
    data_root = Path(tempfile.mkdtemp(prefix="trio-batcher-bench-"))
    http = httpx2.AsyncClient(trust_env=False, timeout=10.0)
    try:
        # All processes start at once (a proxy needs its upstream only when a request
        # comes), then we wait for all of them: start-up costs one interpreter start, not N.
        sim_port = free_port()
        sim_child = await _spawn(
            "simulator",
            ["simulate", "--port", str(sim_port), "--log-level", "warning", *sim_args],
            base,
            log_dir,
            sim_port,
            children,
        )
        waits = [(sim_child, "/_sim/stats?recent=0")]
        stack = Stack(SimServer(sim_child, http))
        if canned is not None:
            port = free_port()
            stack.canned = await _spawn(
                "canned-upstream",
                ["--port", str(port), *canned],
                base,
                log_dir,
                port,
                children,
                module="trio_batcher_bench.canned_upstream",
            )
            waits.append((stack.canned, "/"))
        for name, settings in proxies.items():
            port = free_port()
            data_dir = data_root / name
            env = {
                **base,
                "ANTHROPIC_BASE_URL": stack.upstream_url,
                "ANTHROPIC_API_KEY": SIM_KEY,
                "METRICS_ENABLED": "1",
                "METRICS_LATENCY_WINDOW": "100000",
                "SHUTDOWN_GRACE_S": "2",
                "DATA_DIR": str(data_dir),
                **settings,
            }
            child = await _spawn(
                f"proxy-{name}",
                [
                    "serve",
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                    *(["--workers", str(workers[name])] if workers and name in workers else []),
                ],
                env,
                log_dir,
                port,
                children,
            )
            waits.append((child, "/health"))
            stack.proxies[name] = ProxyServer(child, http, dict(settings), Path(env["DATA_DIR"]))
        if floor:
            port = free_port()
            stack.floor = await _spawn(
                "floor",
                ["--port", str(port), "--upstream", stack.upstream_url],
                base,
                log_dir,
                port,
                children,
                module="trio_batcher_bench.floor",
            )
            waits.append((stack.floor, "/"))
        await _all_ready(waits, http)
        yield stack
    finally:
        with trio.CancelScope(shield=True):
            # Our own idle keep-alive connections go first: a server shutting down gracefully
            # waits for open connections. Then the proxies (together), so none is mid-call
            # when its upstream goes away; then the simulator.
            await http.aclose()
            async with trio.open_nursery() as nursery:
                for child in children[1:]:
                    nursery.start_soon(_stop, child)
            if children:
                await _stop(children[0])
            await trio.to_thread.run_sync(lambda: shutil.rmtree(data_root, ignore_errors=True))
