"""Several worker processes on one listening port, supervised: ``trio-batcher serve --workers N``.

Theory of operation
-------------------
The parent (the supervisor) binds and listens on the one socket itself, then starts N workers,
each ``python -m trio_batcher serve --worker-fd FD``: its own interpreter, its own ``trio.run``,
its own hypercorn, app, windows, gate and metrics, all exactly as a single ``serve`` process,
accepting from the inherited socket (``pass_fds``; hypercorn adopts it as ``fd://FD``). The
parent never accepts a connection: it owns the socket, the workers and, with ``--simulate``,
the one simulated upstream they all call.

Why one inherited socket rather than an ``SO_REUSEPORT`` socket per worker: with
``SO_REUSEPORT`` the kernel hashes each new connection to one worker's own accept queue, and
when that worker dies the connections waiting in its queue are reset. With one socket there is
one queue, and whichever worker is alive takes the next connection, so a crash loses only the
connections the dead worker had already accepted, and the port keeps accepting (into the
backlog) even while no worker is alive. Measured on Linux with two workers paused, 100
connections queued and one worker then killed: 100 of 100 answered with the inherited socket,
52 of 100 with ``SO_REUSEPORT`` (48 reset). ``test_workers.py`` checks the first half. The
price: the kernel wakes every idle worker for a new connection and the quickest accepts it,
instead of hashing connections evenly; with a few workers that costs little and favours the
least busy one.

What each worker gets (its share of the cap, its command line and environment, the socket,
the restart back-off) is decided beforehand, as data, in ``worker_plan.py``.

Who owns what: ``Supervisor.run`` holds the socket and a nursery with one task per worker
slot (``_keep_worker``); a slot task owns its current process, and its ``finally`` kills that
process if the slot is left any other way than through a clean stop, so no worker outlives
its supervisor's task. A worker that exits while the supervisor is not stopping is restarted
after ``RestartBackoff``'s delay (0.5 s doubling to 30 s, back to 0.5 s once a worker has
run for a minute), and each restart is logged.

Stopping: a first SIGTERM or SIGINT to the parent (``stop()``) stops every restart and tells
each worker to drain by closing its stdin, a pipe the parent holds and never writes to
(``drain_when_supervisor_leaves``): the worker then does what a single ``serve`` does on
SIGTERM (stop admitting, let running requests and streams finish for ``SHUTDOWN_GRACE_S``,
close). The pipe, not a forwarded SIGTERM, because a worker that also gets the signal itself
(systemd's default ``KillMode=control-group`` signals every process of the service) would
take the second signal for "stop now"; and because a parent that dies, even of SIGKILL, closes
it too, so orphaned workers drain and exit instead of holding the port. A worker SIGTERMed on
its own drains and is replaced. The workers start in a session of their own, so a terminal's
Ctrl-C reaches only the parent. A worker still running ``stop_budget_s`` after the drain
began is killed. The parent closes its copy of the socket once no worker can be spawned any
more, so the port closes when the last worker stops listening. ``clean`` says whether every
worker exited 0 in time. A second signal kills every worker and exits 130 at once.

Reloading: SIGHUP to the parent (``kill -HUP``, systemd's ``ExecReload``) is neither a stop
nor a restart: ``reload()`` forwards it to every live worker, whose ``TenantsWatcher`` then
rereads ``TENANTS_FILE`` at once, as a single ``serve`` does on SIGHUP. A worker still
starting is skipped: until its process has set SIGHUP aside (``serve`` ignores it from its
entry point on, and the watcher catches it), the signal's default action would end it and the
slot would be restarted; such a worker reads the file as its app is created anyway. The
kernel tells which workers have (``SigIgn``/``SigCgt`` in ``/proc/PID/status``); without
``/proc`` (not Linux) every live worker is signalled.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from typing import NoReturn, final

import trio

from .worker_plan import (
    RestartBackoff,
    WorkerPlan,
    open_listener,
    serve_plan,
    worker_environment,
    worker_share,
)

__all__ = [
    "RestartBackoff",
    "Supervisor",
    "WorkerPlan",
    "drain_when_supervisor_leaves",
    "open_listener",
    "serve_plan",
    "sighup_set_aside",
    "worker_environment",
    "worker_share",
]

log = logging.getLogger("trio_batcher.workers")


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


@final
class Supervisor:
    """Runs and restarts ``plan.count`` workers on one socket until ``stop()``; see the module
    docstring. ``clean`` and ``restarts`` are meaningful once ``run`` has returned."""

    def __init__(self, plan: WorkerPlan) -> None:
        if plan.count < 1:
            raise ValueError(f"need at least one worker, got {plan.count}")
        self.plan = plan
        self.clean = True
        self.restarts = 0
        self._stop = trio.Event()
        # Held around each spawn, and by ``run`` while it closes the socket: no worker can be
        # handed a descriptor that is being closed.
        self._spawn_lock = trio.Lock()
        self._spawning_allowed = True
        self._processes: dict[int, trio.Process] = {}

    def stop(self) -> None:
        """Drain every worker and return from ``run``; idempotent."""
        self._stop.set()

    def reload(self) -> list[int]:
        """Send SIGHUP to every live worker that can take it (see the module docstring), so
        each rereads the tenants file now; the pids signalled. Never stops or restarts one.
        """
        signalled: list[int] = []
        for index, process in sorted(self._processes.items()):
            if process.returncode is not None:
                continue
            if not _takes_sighup(process.pid):
                log.info(
                    "worker %d (pid %d) is still starting: not sent SIGHUP, it reads the "
                    "tenants file as it starts",
                    index,
                    process.pid,
                )
                continue
            process.send_signal(signal.SIGHUP)
            signalled.append(process.pid)
        log.info("SIGHUP forwarded to %d workers %s", len(signalled), signalled)
        return signalled

    async def run(
        self, host: str, port: int, *, task_status: trio.TaskStatus[tuple[str, int]]
    ) -> None:
        """Bind ``host:port``, report the bound address, supervise until stopped and every
        worker has exited.

        Raises:
          OSError: the address cannot be bound.
        """
        listener = open_listener(host, port)
        try:
            async with trio.open_nursery() as outer:
                await outer.start(self._watch_signals)
                async with trio.open_nursery() as slots:
                    for index in range(self.plan.count):
                        slots.start_soon(self._keep_worker, index, listener.fileno())
                    bound_host, bound_port = listener.getsockname()[:2]
                    task_status.started((bound_host, bound_port))
                    await self._stop.wait()
                    async with self._spawn_lock:
                        self._spawning_allowed = False
                        listener.close()
                outer.cancel_scope.cancel()
        finally:
            listener.close()

    async def _keep_worker(self, index: int, fd: int) -> None:
        backoff = RestartBackoff()
        while True:
            async with self._spawn_lock:
                if not self._spawning_allowed or self._stop.is_set():
                    return
                process = await trio.lowlevel.open_process(
                    [*self.plan.argv, "--worker-fd", str(fd)],
                    env=dict(self.plan.env),
                    stdin=subprocess.PIPE,
                    pass_fds=(fd,),
                    start_new_session=True,
                )
            started = trio.current_time()
            log.info("worker %d started (pid %d)", index, process.pid)
            self._processes[index] = process
            try:
                await _wait_or_event(process, self._stop)
                if self._stop.is_set():
                    await self._drain(index, process)
                    return
            finally:
                del self._processes[index]
                with trio.CancelScope(shield=True):
                    if process.returncode is None:
                        process.kill()
                        await process.wait()
                    assert process.stdin is not None
                    await process.stdin.aclose()
            uptime = trio.current_time() - started
            delay = backoff.delay_after(uptime)
            self.restarts += 1
            log.warning(
                "worker %d (pid %d) %s after %.1f s; starting a new one in %.1f s",
                index,
                process.pid,
                _describe_exit(process.returncode),
                uptime,
                delay,
            )
            with trio.move_on_after(delay):
                await self._stop.wait()

    async def _drain(self, index: int, process: trio.Process) -> None:
        """Close the worker's lifeline (it drains as on SIGTERM) and wait for it to exit;
        kill it after ``stop_budget_s``."""
        assert process.stdin is not None
        await process.stdin.aclose()
        with trio.move_on_after(self.plan.stop_budget_s):
            await process.wait()
        if process.returncode is None:
            log.warning(
                "worker %d (pid %d) still running %.0f s after its drain began; killing it",
                index,
                process.pid,
                self.plan.stop_budget_s,
            )
            self.clean = False
            process.kill()
            await process.wait()
        elif process.returncode != 0:
            self.clean = False
            log.warning(
                "worker %d (pid %d) %s while draining",
                index,
                process.pid,
                _describe_exit(process.returncode),
            )

    async def _watch_signals(self, *, task_status: trio.TaskStatus[None]) -> None:
        """First SIGINT/SIGTERM: ``stop()``. A second one: kill every worker and exit 130.
        SIGHUP, at any time: ``reload()``.

        "Exit" is ``os._exit``, as for a single ``serve``: whoever sends a second signal wants
        the processes gone, not a cancellation that might wait on a shielded cleanup.
        """
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    self.reload()
                    continue
                name = signal.Signals(signum).name
                if self._stop.is_set():
                    self._kill_all_now(f"{name} received again, killing the workers")
                print(
                    f"trio-batcher: {name} received, draining {self.plan.count} workers "
                    "(send again to stop at once)",
                    file=sys.stderr,
                    flush=True,
                )
                self.stop()

    def _kill_all_now(self, message: str) -> NoReturn:
        for process in self._processes.values():
            if process.returncode is None:
                process.kill()
        print(f"trio-batcher: {message}", file=sys.stderr, flush=True)
        os._exit(130)


def sighup_set_aside(status: str) -> bool:
    """Whether a ``/proc/PID/status`` text shows SIGHUP ignored or caught (``SigIgn`` /
    ``SigCgt``, hexadecimal masks in which signal n is bit n - 1), not left to its default
    action, which ends the process."""
    bit = 1 << (signal.SIGHUP - 1)
    for line in status.splitlines():
        field, _, mask = line.partition(":")
        if field in ("SigIgn", "SigCgt") and int(mask, 16) & bit:
            return True
    return False


def _takes_sighup(pid: int) -> bool:
    """Whether the child ``pid`` survives SIGHUP; True where the kernel cannot say.

    A child not yet waited for keeps its ``/proc`` entry, even as a zombie, so an
    ``OSError`` means there is no ``/proc`` here.
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as file:
            status = file.read()
    except OSError:
        return True
    return sighup_set_aside(status)


async def _wait_or_event(process: trio.Process, event: trio.Event) -> None:
    """Return when ``process`` exits or ``event`` is set, whichever comes first (the process
    keeps running in the second case: cancelling ``Process.wait`` does not signal it)."""
    async with trio.open_nursery() as race:

        async def wait_event() -> None:
            await event.wait()
            race.cancel_scope.cancel()

        race.start_soon(wait_event)
        await process.wait()
        race.cancel_scope.cancel()


async def drain_when_supervisor_leaves(
    stop: trio.Event, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """In a worker: set ``stop`` (drain, as on SIGTERM) when stdin, the supervisor's pipe,
    reaches end of file: the supervisor closed it to stop us, or died.

    Nothing is ever written to the pipe; whatever is read is ignored.
    """
    async with trio.lowlevel.FdStream(os.dup(0)) as lifeline:
        task_status.started()
        while await lifeline.receive_some():
            pass
    if not stop.is_set():
        log.info("supervisor asked this worker to drain (or is gone)")
        stop.set()
