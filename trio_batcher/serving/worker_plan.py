"""What ``serve --workers N`` starts: each worker's share of the cap, its command line and
environment, the one listening socket, and the restart back-off -- decided before any process
runs, so it can be tested as data. ``workers.py`` supervises the processes.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

from .server import LISTEN_BACKLOG

__all__ = [
    "KILL_MARGIN_S",
    "RestartBackoff",
    "WorkerPlan",
    "open_listener",
    "serve_plan",
    "worker_environment",
    "worker_share",
]

log = logging.getLogger("trio_batcher.workers")

RESTART_FIRST_S: Final = 0.5
RESTART_MAX_S: Final = 30.0
# A worker that ran this long before it exited was healthy: the next restart is quick again.
HEALTHY_AFTER_S: Final = 60.0
# Beyond a worker's own worst case (its drain, hypercorn's close, its stuck-exit timer).
KILL_MARGIN_S: Final = 2.0


def worker_share(cap: int, workers: int) -> int:
    """Each worker's ``BATCH_MAX_CONCURRENCY`` when ``workers`` share a cap of ``cap``.

    Without shared state every worker enforces its own limit, so the upstream sees at most the
    sum: ``cap // workers`` keeps that sum within ``cap``. At least 1, since a worker with no
    slot could never call upstream: with fewer slots than workers the sum is ``workers``.
    """
    if cap < 1 or workers < 1:
        raise ValueError(f"cap and workers must be >= 1, got {cap} and {workers}")
    return max(1, cap // workers)


@final
class RestartBackoff:
    """How long to wait before restarting a worker that exited, so a crash loop cannot spin.

    The first restart waits ``first`` seconds, each further one twice as long up to
    ``maximum``; a worker that had run for ``healthy_after`` seconds before it exited resets
    the delay to ``first``. Pure: the caller measures the uptime.
    """

    def __init__(
        self,
        first: float = RESTART_FIRST_S,
        maximum: float = RESTART_MAX_S,
        healthy_after: float = HEALTHY_AFTER_S,
    ) -> None:
        self._first = first
        self._maximum = maximum
        self._healthy_after = healthy_after
        self._next = first

    def delay_after(self, uptime: float) -> float:
        """The wait before the next start of a worker that ran ``uptime`` seconds."""
        if uptime >= self._healthy_after:
            self._next = self._first
        delay = self._next
        self._next = min(self._next * 2, self._maximum)
        return delay


def worker_environment(
    base: Mapping[str, str], overrides: Mapping[str, str], share: int
) -> dict[str, str]:
    """A worker's environment: ``base`` (the parent's), then ``overrides`` (the settings the
    parent got as flags, and the simulator's address), then the worker's share of the cap.

    Settings travel as environment variables, the form every setting has (flags do not exist
    for secrets), so a worker parses exactly what the parent validated.
    """
    env = {**base, **overrides}
    env["BATCH_MAX_CONCURRENCY"] = str(share)
    return env


def open_listener(host: str, port: int) -> socket.socket:
    """The listening socket every worker inherits, bound as hypercorn would bind it.

    ``TCP_NODELAY`` is set here because hypercorn sets it only on sockets it binds itself,
    and accepted connections inherit it from the listener.

    Raises:
      OSError: the address cannot be bound (in use, not local).
    """
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


@final
@dataclass(frozen=True)
class WorkerPlan:
    """What the supervisor starts: ``count`` copies of ``argv`` (a ``serve`` command line to
    which ``--worker-fd FD`` is appended) with ``env``, each killed if still running
    ``stop_budget_s`` after its drain began; ``share`` is each one's upstream cap."""

    count: int
    argv: Sequence[str]
    env: Mapping[str, str]
    stop_budget_s: float
    share: int


def serve_plan(
    count: int,
    *,
    cap: int,
    overrides: Mapping[str, str],
    stop_budget_s: float,
    log_level: str,
    access_log: bool,
    shared_cap: bool = False,
) -> WorkerPlan:
    """The plan for ``serve --workers count``: workers running ``serve`` with the parent's
    environment, ``overrides`` and ``cap``'s share (``worker_share``), killed
    ``KILL_MARGIN_S`` after a worker's own worst case (``stop_budget_s``) has passed.

    Logs a warning when the shares add up to more than ``cap`` (fewer slots than workers).
    """
    # With REDIS_URL the workers share the cap itself (leases), so each is given all of it.
    share = cap if shared_cap else worker_share(cap, count)
    if not shared_cap and share * count > cap:
        log.warning(
            "BATCH_MAX_CONCURRENCY=%d is less than --workers %d: each worker still gets 1 "
            "upstream slot, %d in total",
            cap,
            count,
            share * count,
        )
    argv = [sys.executable, "-m", "trio_batcher", "serve", "--log-level", log_level]
    if access_log:
        argv.append("--access-log")
    return WorkerPlan(
        count=count,
        argv=argv,
        env=worker_environment(os.environ, overrides, share),
        stop_budget_s=stop_budget_s + KILL_MARGIN_S,
        share=share,
    )
