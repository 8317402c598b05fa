"""Run an ASGI app under hypercorn's trio worker, inside a nursery the caller owns.

Tests, the embedded simulator and ``trio-batcher serve`` all host servers the same way:
``await nursery.start(serve_app, app, ...)`` returns the bound ``(host, port)`` once the
socket is listening, and setting ``shutdown`` makes hypercorn stop accepting, let in-flight
requests finish for up to ``graceful_timeout`` seconds, and run the app's lifespan
shutdown. Binding port 0 picks a free ephemeral port.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

# Allocations between young-generation collections (CPython's default is 700).
_GC_GEN0_THRESHOLD = 50_000
# Pending connections the kernel holds for accept(); Linux caps it at net.core.somaxconn.
LISTEN_BACKLOG = 1024


def hypercorn_config(
    host: str,
    port: int,
    *,
    graceful_timeout: float = 30.0,
    keep_alive_timeout: float = 5.0,
    access_log: bool = False,
    fd: int | None = None,
) -> Config:
    config = Config()
    if fd is not None:
        # A listening socket inherited from a supervisor (``serve --workers``): hypercorn
        # adopts it as it is, and ``host``/``port`` are not used.
        config.bind = [f"fd://{fd}"]
    else:
        config.bind = [f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"]
    config.graceful_timeout = graceful_timeout
    # Short: hypercorn 0.18 holds a connection its client closed before sending anything
    # for the whole keep-alive timeout, so a long one lets bare connects use up file
    # descriptors (KEEPALIVE_TIMEOUT_S). It never cuts a request: it runs only while idle.
    config.keep_alive_timeout = keep_alive_timeout
    # Room for a burst of new connections while the event loop is busy: hypercorn's default
    # (100) overflows under a few hundred clients arriving together, and the kernel then
    # drops their handshakes (a second's retransmit later) or resets them.
    config.backlog = LISTEN_BACKLOG
    # No read timeout: SSE streams and LLM calls outlive any; the request deadline rules.
    config.read_timeout = None
    config.accesslog = logging.getLogger("hypercorn.access") if access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def tune_gc_for_serving() -> None:
    """Make the cyclic garbage collector cheap for a long-running server process.

    A proxied request allocates a few thousand short-lived objects (parsed JSON, headers,
    coroutines), nearly all freed by reference counting. With CPython's default threshold
    the collector still runs every 700 allocations and walks every young object each time:
    measured here, about 7% of the proxy's CPU per request. ``gc.freeze()`` moves what
    exists at startup (modules, the app, its settings) out of the collector's sight for
    good, and a higher young-generation threshold runs it less often; cycles are still
    collected. Process-wide, so only the process entry points call it, never a library.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GC_GEN0_THRESHOLD, gen1, gen2)


# glibc's mallopt parameter, and the size from which allocations get pages of their own.
_M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD_BYTES: Final = 1024 * 1024


def tune_malloc_for_serving() -> None:
    """Give every allocation of ``MMAP_THRESHOLD_BYTES`` or more pages of its own, returned
    to the kernel the moment it is freed; a no-op off glibc.

    Why: a request body, its decoded text and its upstream serialisation are buffers of up
    to tens of megabytes each. glibc starts by mapping such buffers separately, but raises
    its threshold to the size of each one freed (up to 32 MiB), so after the first large
    request the next ones come from the heap, and a heap keeps what it frees unless it
    lies at the top. Measured with ten concurrent 30 MiB bodies: RSS grew by 2.3 times
    their total with the moving threshold, 1.3 times with this fixed one. Smaller
    allocations (hypercorn's and httpcore2's 64 KiB reads) stay in the heap, where the
    periodic trim (``tidy_heap_periodically``) returns what they free. Process-wide, so
    only the process entry points call it.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None off glibc (musl, macOS, Windows)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return cast(Callable[[int], int], trim)


# A tidy runs once the requests finished since the last one are at least this share of
# the requests open now, or after this many intervals skipped (``TidySchedule``).
TIDY_SHARE: Final = 0.25
TIDY_MAX_SKIPS: Final = 15

Activity = Callable[[], tuple[int, int]]
"""``(requests finished so far, requests open now)``: what the tidy schedule reads."""


@dataclass
class TidySchedule:
    """Whether an interval's tidy is worth its pause: pure, so it is tested as data.

    A full collection walks every live object: ~1 µs each on the 2-core machine the
    benchmarks run on, so 1,000 open streams (~300,000 objects) pause the process for
    ~300 ms, and every stream's next event with it. It pays when there is garbage to free,
    and the garbage it exists for is what finished requests leave behind (their
    connections and streams, dead in reference cycles); the live objects it walks are what
    the open ones hold. So a tidy runs when the requests finished since the last tidy are
    at least ``TIDY_SHARE`` of those open now (CPython's own ratio for its oldest
    generation, in requests rather than objects), and at least every ``TIDY_MAX_SKIPS + 1``
    intervals whatever happened. Churn is collected as often as before; a thousand long
    streams that are still open are not paused every 30 s for nothing, but every 8 minutes.
    """

    finished_at_last: int = 0  # requests finished as of the last tidy
    skipped: int = 0

    def due(self, finished: int, open_now: int) -> bool:
        since = finished - self.finished_at_last
        if self.skipped >= TIDY_MAX_SKIPS or (since > 0 and since >= TIDY_SHARE * open_now):
            self.finished_at_last = finished
            self.skipped = 0
            return True
        self.skipped += 1
        return False


async def tidy_heap_periodically(interval_s: float, activity: Activity | None = None) -> None:
    """Every ``interval_s`` (``HEAP_TRIM_INTERVAL_S``) collect the garbage in reference
    cycles -- when ``activity`` is given, only if enough requests finished since the last
    time to be worth it (``TidySchedule``) -- then give the free pages inside glibc's heap
    back to the kernel; returns at once when ``interval_s`` is 0.

    Why the collection: hypercorn builds each connection as a reference cycle (its
    ``TCPServer``, protocol, ``h11`` connection, socket stream, locks and events point at
    each other). A connection lives longer than the young generations last at
    ``tune_gc_for_serving``'s threshold, so it is promoted to the oldest generation alive,
    and when it closes it becomes garbage there, which CPython collects only when that
    generation has grown by a quarter. Under connection churn that garbage piled up to
    thousands of dead connections (1,721 ``trio.Lock``s and 851 ``TCPServer``s found
    by one collection after 30 s of the soak), and RSS grew with it: 329 bytes per request
    over a 3-minute soak, 7.4 MiB after the warm-up. A full collection every 30 s frees it
    while it is small: 0.3 MiB over the same soak. It costs a pause proportional to the
    live objects (milliseconds at a few hundred open requests, hundreds of milliseconds at
    a thousand open streams), hence the schedule.

    Why the trim: each new connection (a client's or the upstream's) and each read
    allocates and frees buffers of up to 64 KiB between long-lived small blocks (hypercorn
    and httpcore2 read 64 KiB at a time), and glibc only returns the top of its heap to the
    kernel. ``malloc_trim(0)`` releases whole free pages anywhere in the heap, in well
    under a millisecond (measured: 45 B/request over 60,000 requests without it, 5 with).
    Off glibc only the collection runs.
    """
    if interval_s <= 0:
        return
    trim = _malloc_trim()
    schedule = TidySchedule()
    while True:
        await trio.sleep(interval_s)
        if activity is None or schedule.due(*activity()):
            gc.collect()
        if trim is not None:  # cheap, and what a request's buffers freed is worth returning
            trim(0)


def raise_open_file_limit() -> None:
    """Lift the soft limit on open files to the hard one.

    Every client connection and upstream connection is a file descriptor, and the usual
    soft limit (1024) is reached by a few hundred idle keep-alive clients; the hard limit is
    what the administrator meant to allow. Process-wide: entry points only.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def parse_bind(bind: str) -> tuple[str, int]:
    """``"127.0.0.1:8000"`` / ``"[::1]:8000"`` → ``("127.0.0.1", 8000)``."""
    host, _, port = bind.rpartition(":")
    return host.strip("[]"), int(port)


async def serve_app(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    shutdown: trio.Event | None = None,
    graceful_timeout: float = 30.0,
    keep_alive_timeout: float = 5.0,
    access_log: bool = False,
    fd: int | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown`` is set (or the caller's scope is cancelled).

    Reports the first bound ``(host, port)`` through ``task_status``. If the app has an
    async ``drain()`` method (the proxy does), it runs when ``shutdown`` is set, while
    hypercorn is still accepting; hypercorn's graceful shutdown (``graceful_timeout``)
    starts after it returns. With ``fd``, serve on that already-listening socket (inherited
    from ``serve --workers``' supervisor) instead of binding ``host:port``.
    """
    drain = getattr(app, "drain", None)
    config = hypercorn_config(
        host,
        port,
        graceful_timeout=graceful_timeout,
        keep_alive_timeout=keep_alive_timeout,
        access_log=access_log,
        fd=fd,
    )

    async def trigger() -> None:
        if shutdown is None:
            await trio.sleep_forever()
        else:
            await shutdown.wait()
        if drain is not None:
            await drain()

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(serve, app, config, shutdown_trigger=trigger)
        )
        task_status.started(parse_bind(binds[0].removeprefix("http://")))
