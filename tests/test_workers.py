"""``trio-batcher serve --workers N``: real processes on loopback, real signals.

Each test starts ``serve --workers 2 --simulate`` (the simulator runs once, in the
supervisor) and tells the workers apart from the outside: which worker holds the server end
of a client's connection is read from the kernel's socket table (psutil), so no header or
endpoint had to be added for the tests. Every wait polls for a condition under a deadline.
SIGHUP, a reload, is followed into the workers through their log lines (which carry their
pid) and proved by the keys they accept; one test checks a single ``serve`` survives it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx2
import psutil
import pytest
import trio

from trio_batcher.serving.workers import (
    RestartBackoff,
    sighup_set_aside,
    worker_environment,
    worker_share,
)
from trio_batcher.settings import SPECS
from trio_batcher.tenants import hash_key

HELLO = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello"}]}
# Two seconds of stream: 40 tokens at 20 tokens/s (simulator directive, see simulator/faults.py).
SLOW_STREAM = {
    "model": "claude-sonnet-4-5",
    "stream": True,
    "messages": [{"role": "user", "content": "[[sim:tokens=40,tokens_per_s=20]] go"}],
}
START_S = 60.0  # three interpreters importing the app, on a loaded 2-core machine
_READY = re.compile(r"worker (\d+) serving")
_STARTED = re.compile(r"worker \d+ started \(pid (\d+)\)")
# What a worker's TenantsWatcher logs (workers' log lines carry their pid).
_SIGHUP_RELOAD = re.compile(r"trio_batcher\[(\d+)\]: SIGHUP: reloading the tenants file")
_RELOADED = re.compile(r"trio_batcher\[(\d+)\]: tenants file .* reloaded: ")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {s.env for s in SPECS}}
    env.update(extra)
    return env


def _sets_sighup_aside(pid: int) -> bool:
    """The process ignores or catches SIGHUP (the kernel's view): it would survive one."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return sighup_set_aside(status.read())


def _gone(pid: int) -> bool:
    """Exited (a zombie counts: its sockets are closed)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@dataclass
class Cluster:
    process: trio.Process
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def workers(self) -> set[int]:
        """The supervisor's live children: its workers."""
        try:
            children = psutil.Process(self.process.pid).children()
        except psutil.NoSuchProcess:
            return set()
        return {child.pid for child in children if not _gone(child.pid)}

    def ready_workers(self) -> set[int]:
        """Workers alive that have said they are serving."""
        return {int(pid) for pid in _READY.findall(self.log())} & self.workers()

    def clients_held(self) -> dict[int, int]:
        """For each live worker, the client connections it holds on the port (it accepted
        them, so it answered whatever was asked on them)."""
        held: dict[int, int] = {}
        for pid in self.workers():
            try:
                connections = psutil.Process(pid).net_connections(kind="tcp")
            except psutil.NoSuchProcess:
                continue
            held[pid] = sum(
                1
                for c in connections
                if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == self.port
            )
        return held

    async def wait_for(self, condition: str, predicate: Callable[[], bool]) -> None:
        """Poll ``predicate()`` until true (another process: no event to wait on); a
        deadline belongs around the call."""
        while not predicate():
            assert self.process.poll() is None, f"supervisor exited ({condition}):\n{self.log()}"
            await trio.sleep(0.02)


@asynccontextmanager
async def starting_workers(tmp_path: Path, **env: str) -> AsyncIterator[Cluster]:
    """``serve --workers 2 --simulate`` with an instant simulator, as soon as it is
    spawned. Whatever happens, every process is gone afterwards."""
    port = _free_port()
    log_path = tmp_path / "serve.log"
    argv = [
        sys.executable,
        "-m",
        "trio_batcher",
        "serve",
        "--workers",
        "2",
        "--simulate",
        "--port",
        str(port),
        "--sim-ttft-ms",
        "0",
        "--sim-tokens-per-s",
        "0",
    ]
    with log_path.open("wb") as log:
        process = await trio.lowlevel.open_process(
            argv,
            env=_clean_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    cluster = Cluster(process, port, log_path)
    workers: set[int] = set()
    try:
        yield cluster
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                workers = cluster.workers()
                process.kill()
            for pid in workers:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await process.wait()


@asynccontextmanager
async def running_workers(tmp_path: Path, **env: str) -> AsyncIterator[Cluster]:
    """``starting_workers``, ready: both workers say they serve."""
    async with starting_workers(tmp_path, **env) as cluster:
        with trio.fail_after(START_S):
            await cluster.wait_for("start", lambda: len(cluster.ready_workers()) == 2)
        yield cluster


async def _answered_chat(client: httpx2.AsyncClient, url: str) -> None:
    reply = await client.post(f"{url}/v1/chat/completions", json=HELLO, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["object"] == "chat.completion"


def _tenants_file(key: str) -> str:
    """One tenant whose one key is ``key``: the same length whatever the key."""
    return f'[[tenant]]\nname = "acme"\nkey_sha256 = ["{hash_key(key)}"]\n'


def _signature(path: Path) -> tuple[int, int, int, int]:
    """What ``TenantsWatcher``'s poll compares: device, inode, size, mtime (ns)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _rewrite_unseen_by_the_poll(path: Path, text: str) -> None:
    """Write ``text`` into ``path``'s inode and put its modification time back: the size
    must not change, so the poll's signature stays what it was."""
    before = os.stat(path)
    data = text.encode()
    assert len(data) == before.st_size
    with path.open("r+b") as file:
        file.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


async def _every_worker_answers(cluster: Cluster, statuses: dict[str, int]) -> None:
    """Ask ``/v1/models`` with each key in ``statuses`` on fresh connections until every
    worker has answered some, each answer with the key's status; a deadline belongs around
    the call."""
    clients: list[httpx2.AsyncClient] = []
    try:
        while not all(cluster.clients_held().values()):
            client = httpx2.AsyncClient(trust_env=False)
            clients.append(client)
            for key, status in statuses.items():  # all on one connection: one worker
                headers = {"Authorization": f"Bearer {key}"}
                reply = await client.get(f"{cluster.url}/v1/models", headers=headers, timeout=30)
                assert reply.status_code == status, (key, reply.text)
    finally:
        with trio.CancelScope(shield=True):
            for client in clients:
                await client.aclose()
    # The next call starts from no connection held.
    await cluster.wait_for("closed", lambda: not any(cluster.clients_held().values()))


# -- the per-worker cap and the restart delays (pure) -----------------------------------------


@pytest.mark.parametrize(
    ("cap", "workers", "share"),
    [(16, 1, 16), (16, 2, 8), (16, 3, 5), (17, 4, 4), (3, 4, 1), (1, 8, 1)],
)
def test_each_worker_gets_the_cap_divided_by_the_workers_at_least_one(
    cap: int, workers: int, share: int
) -> None:
    assert worker_share(cap, workers) == share
    assert share * workers <= max(cap, workers)


def test_worker_share_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        worker_share(16, 0)


def test_the_worker_environment_carries_flags_and_the_share_over_the_parent_env() -> None:
    base = {"BATCH_MAX_CONCURRENCY": "16", "MAX_INFLIGHT": "10", "PATH": "/bin"}
    env = worker_environment(base, {"MAX_INFLIGHT": "20", "BATCH_MAX_CONCURRENCY": "12"}, 6)
    assert env == {"BATCH_MAX_CONCURRENCY": "6", "MAX_INFLIGHT": "20", "PATH": "/bin"}
    assert base["BATCH_MAX_CONCURRENCY"] == "16"  # the parent's own environment is untouched


def test_restart_delays_double_to_a_ceiling_and_reset_after_a_healthy_minute() -> None:
    backoff = RestartBackoff(first=0.5, maximum=30.0, healthy_after=60.0)
    crash_loop = [backoff.delay_after(uptime=0.1) for _ in range(9)]
    assert crash_loop == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert backoff.delay_after(uptime=59.9) == 30.0
    assert backoff.delay_after(uptime=60.0) == 0.5
    assert backoff.delay_after(uptime=1.0) == 1.0


def test_sighup_is_set_aside_when_ignored_or_caught_and_not_by_default() -> None:
    status = "Name:\tpython\nSigPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n"
    assert not sighup_set_aside(status + "SigIgn:\t0000000001001000\nSigCgt:\t0000000180004a02\n")
    assert sighup_set_aside(status + "SigIgn:\t0000000001001001\nSigCgt:\t0000000180004a02\n")
    assert sighup_set_aside(status + "SigIgn:\t0000000001001000\nSigCgt:\t0000000180004a03\n")


# -- real processes ---------------------------------------------------------------------------


async def test_two_workers_share_one_port_and_both_answer(tmp_path: Path) -> None:
    env = {
        "KEEPALIVE_TIMEOUT_S": "60",
        "BATCH_ENABLED": "1",
        "BATCH_MAX_CONCURRENCY": "16",
        "METRICS_ENABLED": "1",
    }
    async with running_workers(tmp_path, **env) as cluster:
        assert "with 2 workers (BATCH_MAX_CONCURRENCY 8 each)" in cluster.log()
        clients: list[httpx2.AsyncClient] = []
        try:
            with trio.fail_after(30):
                # One connection per client, kept open: the worker holding it answered it.
                # Which idle worker accepts a new connection is a race: poll until both did.
                while not all(cluster.clients_held().values()):
                    client = httpx2.AsyncClient(trust_env=False)
                    clients.append(client)
                    await _answered_chat(client, cluster.url)
            held = cluster.clients_held()
            assert len(held) == 2 and sum(held.values()) == len(clients)
            # Each worker answers /metrics for itself, with its share of the cap.
            for client in clients:
                snapshot = (await client.get(f"{cluster.url}/metrics")).json()
                assert snapshot["concurrency"]["upstream_cap"] == 8
                assert 0 < snapshot["requests"]["success"] < len(clients)
        finally:
            with trio.CancelScope(shield=True):
                for client in clients:
                    await client.aclose()


async def test_sigterm_lets_streams_in_flight_finish_on_every_worker(tmp_path: Path) -> None:
    grace = 20.0
    env = {"SHUTDOWN_GRACE_S": str(grace), "KEEPALIVE_TIMEOUT_S": "60"}
    async with running_workers(tmp_path, **env) as cluster:
        chunks: list[list[str]] = []
        async with trio.open_nursery() as nursery:

            async def stream(task_status: trio.TaskStatus[None]) -> None:
                mine: list[str] = []
                chunks.append(mine)
                async with (
                    httpx2.AsyncClient(trust_env=False, timeout=60) as client,
                    client.stream(
                        "POST", f"{cluster.url}/v1/chat/completions", json=SLOW_STREAM
                    ) as reply,
                ):
                    assert reply.status_code == 200
                    started = False
                    async for line in reply.aiter_lines():
                        if line.startswith("data: "):
                            mine.append(line.removeprefix("data: "))
                            if not started:
                                started = True
                                task_status.started()

            with trio.fail_after(30):
                # Streams take 2 s each; start them until both workers are serving some.
                while not (len(chunks) >= 2 and all(cluster.clients_held().values())):
                    await nursery.start(stream)
            at_sigterm = [len(mine) for mine in chunks]
            cluster.process.send_signal(signal.SIGTERM)
            with trio.fail_after(grace):
                await cluster.process.wait()
        log = cluster.log()
        assert cluster.process.returncode == 0, log
        assert "SIGTERM received, draining 2 workers" in log
        assert "Traceback" not in log and "grace period over" not in log
        for mine, before in zip(chunks, at_sigterm, strict=True):
            assert mine[-1] == "[DONE]"
            assert len(mine) > before  # it was still streaming when the signal came
            events = [json.loads(data) for data in mine[:-1]]
            assert not any("error" in event for event in events)
            reasons = [
                c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]
            ]
            assert reasons == ["length"] or reasons == ["stop"]


async def test_a_killed_worker_is_replaced_and_the_port_keeps_answering(tmp_path: Path) -> None:
    async with running_workers(tmp_path, KEEPALIVE_TIMEOUT_S="60") as cluster:
        first = cluster.workers()
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        clients: list[httpx2.AsyncClient] = []
        answered_while_one = 0
        try:
            with trio.fail_after(30):
                await cluster.wait_for("victim reaped", lambda: _gone(victim))
                while True:
                    client = httpx2.AsyncClient(trust_env=False)
                    clients.append(client)
                    await _answered_chat(client, cluster.url)  # every one, throughout
                    new = cluster.workers() - first
                    if not new:
                        answered_while_one += 1
                    elif cluster.clients_held().get(min(new)):
                        break  # the replacement has answered too
        finally:
            with trio.CancelScope(shield=True):
                for client in clients:
                    await client.aclose()
        assert answered_while_one > 0
        assert len(cluster.workers()) == 2
        log = cluster.log()
        assert f"(pid {victim}) was killed by SIGKILL" in log
        assert "starting a new one in 0.5 s" in log


async def test_connections_queued_on_the_shared_socket_survive_a_worker_death(
    tmp_path: Path,
) -> None:
    # The reason for one inherited socket over SO_REUSEPORT: there is one accept queue, so
    # connections waiting in it are not lost with a worker (SO_REUSEPORT resets ~half here).
    async with running_workers(tmp_path) as cluster:
        victim, survivor = sorted(cluster.workers())
        request = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        streams: list[trio.SocketStream] = []
        try:
            for pid in (victim, survivor):
                os.kill(pid, signal.SIGSTOP)
            with trio.fail_after(30):
                for _ in range(20):  # queued by the kernel: nobody is accepting
                    stream = await trio.open_tcp_stream("127.0.0.1", cluster.port)
                    streams.append(stream)
                    await stream.send_all(request)
                os.kill(victim, signal.SIGKILL)
                await cluster.wait_for("victim reaped", lambda: _gone(victim))
                os.kill(survivor, signal.SIGCONT)
                for stream in streams:
                    reply = b""
                    while chunk := await stream.receive_some():
                        reply += chunk
                    assert reply.startswith(b"HTTP/1.1 200"), reply
        finally:
            with trio.CancelScope(shield=True):
                if not _gone(survivor):
                    os.kill(survivor, signal.SIGCONT)
                for stream in streams:
                    await stream.aclose()


async def test_workers_drain_and_exit_when_the_supervisor_dies(tmp_path: Path) -> None:
    async with running_workers(tmp_path) as cluster:
        workers = cluster.workers()
        cluster.process.kill()
        with trio.fail_after(30):
            await cluster.process.wait()
            while not all(_gone(pid) for pid in workers):  # noqa: ASYNC110 - other processes
                await trio.sleep(0.02)
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", cluster.port)


def test_workers_must_be_at_least_one() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trio_batcher", "serve", "--simulate", "--workers", "0"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "trio-batcher: error: --workers must be at least 1, got 0"


async def test_sighup_to_the_supervisor_makes_every_worker_reload_the_tenants_file_at_once(
    tmp_path: Path,
) -> None:
    old_key, new_key = "tb-workers-key-before", "tb-workers-key-after"
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(_tenants_file(old_key))
    env = {"TENANTS_FILE": str(tenants), "KEEPALIVE_TIMEOUT_S": "60"}
    async with running_workers(tmp_path, **env) as cluster:
        workers = cluster.workers()
        with trio.fail_after(30):
            await _every_worker_answers(cluster, {old_key: 200, new_key: 401})
        # The new key replaces the old one where no poll can see it: while the workers are
        # stopped, in place, same size, the modification time put back.
        before = _signature(tenants)
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        try:
            _rewrite_unseen_by_the_poll(tenants, _tenants_file(new_key))
        finally:
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
        assert _signature(tenants) == before
        cluster.process.send_signal(signal.SIGHUP)

        def reloaded() -> set[int]:
            return {int(pid) for pid in _RELOADED.findall(cluster.log())}

        with trio.fail_after(30):
            await cluster.wait_for("both reload", lambda: reloaded() == workers)
            await _every_worker_answers(cluster, {new_key: 200, old_key: 401})
        log = cluster.log()
        assert "SIGHUP forwarded to 2 workers" in log
        # One reload in each worker, and that one on the signal: the poll did none.
        assert sorted(_RELOADED.findall(log)) == sorted(_SIGHUP_RELOAD.findall(log))
        assert sorted(map(int, _RELOADED.findall(log))) == sorted(workers)
        assert cluster.workers() == workers and cluster.process.poll() is None
        assert "starting a new one" not in log and "draining" not in log


async def test_sighup_while_the_workers_start_neither_kills_nor_restarts_one(
    tmp_path: Path,
) -> None:
    async with starting_workers(tmp_path) as cluster:
        with trio.fail_after(START_S):
            await cluster.wait_for(
                "supervisor takes SIGHUP", lambda: _sets_sighup_aside(cluster.process.pid)
            )
            # From before the workers exist until both serve (and not one of them without a
            # tenants file ever catches it).
            while len(cluster.ready_workers()) < 2:
                assert "starting a new one" not in cluster.log(), cluster.log()
                cluster.process.send_signal(signal.SIGHUP)
                await trio.sleep(0.05)
            cluster.process.send_signal(signal.SIGHUP)
            await cluster.wait_for(
                "forwarded to both", lambda: "SIGHUP forwarded to 2 workers" in cluster.log()
            )
        log = cluster.log()
        assert "is still starting: not sent SIGHUP" in log  # the signals did come that early
        assert "starting a new one" not in log and "was killed" not in log
        assert {int(pid) for pid in _STARTED.findall(log)} == cluster.workers()
        assert len(cluster.workers()) == 2 and cluster.process.poll() is None


async def test_sighup_does_not_end_a_single_serve_starting_or_without_a_tenants_file(
    tmp_path: Path,
) -> None:
    port = _free_port()
    log_path = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "trio_batcher", "serve", "--simulate", "--port", str(port)]
    with log_path.open("wb") as log:
        process = await trio.lowlevel.open_process(
            argv, env=_clean_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        with trio.fail_after(START_S):
            while not _sets_sighup_aside(process.pid):
                assert process.poll() is None, log_path.read_text()
                await trio.sleep(0.02)
            while "trio-batcher: serving" not in log_path.read_text():
                assert process.poll() is None, log_path.read_text()
                process.send_signal(signal.SIGHUP)
                await trio.sleep(0.05)
        process.send_signal(signal.SIGHUP)
        async with httpx2.AsyncClient(trust_env=False) as client:
            reply = await client.get(f"http://127.0.0.1:{port}/health", timeout=30)
        assert reply.status_code == 200
        assert process.poll() is None, log_path.read_text()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
