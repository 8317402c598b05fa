"""Load drivers: closed loop, open loop, and one request as the client experiences it.

Theory of operation
-------------------
Every request has an *intended* start time. In a closed loop (``closed_loop``: N workers,
each sending its next request as soon as the previous one finished) that is simply when the
worker got to it. In an open loop (``open_loop``) arrivals follow a fixed schedule
``start + i / rate`` whatever the server does, and **latency is measured from the intended
time**, not from when the request actually left: if the driver or the server falls behind,
that delay is part of the latency, so coordinated omission cannot hide queueing. An arrival
the driver cannot send is counted, never silently skipped: ``unsent_late`` when the
scheduler was already more than ``max_lag`` behind it, ``unsent_bound`` when the driver's
own concurrency bound was reached.

Requests are owned by the driver's nursery; a driver returns when every request it started
has finished, so every request it counts has a final outcome (needed to reconcile with the
proxy's own counters). ``Abort`` makes a request leave on purpose -- after a time, or after
some content events of a stream -- by closing its connection, which is how a real client
disconnects.

Clocks: latencies use trio's clock; ``abort_at`` is ``time.monotonic()``, the system-wide
clock the simulator stamps its traces with, so the two can be compared across processes.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias, final

import trio

from .sse import Api, ContentCounter, EventCounter, StreamEnding
from .wire import Connection, Head, Pool, ProtocolError, encode_request

__all__ = [
    "Abort",
    "Kind",
    "Outcome",
    "Quota",
    "Run",
    "Tally",
    "Target",
    "call",
    "closed_loop",
    "open_loop",
]

Kind: TypeAlias = Literal["ok", "shed", "error", "aborted"]

# Error codes with which the proxy's admission gate sheds a request (429 / 503).
SHED_CODES: Final = frozenset({"queue_full", "queue_timeout", "shutdown"})
REQUEST_TIMEOUT_S: Final = 60.0
_ERROR_BODY_KEEP: Final = 4096


@final
@dataclass(frozen=True)
class Target:
    """One pre-encoded request and where it goes.

    Attributes:
      via: ``"simulator"`` (direct) or ``"proxy"``.
      api: which wire format the answer is in, to find content events in a stream.
    """

    via: Literal["simulator", "proxy"]
    api: Api
    host: str
    port: int
    stream: bool
    request: bytes

    @classmethod
    def build(
        cls,
        via: Literal["simulator", "proxy"],
        url: str,
        path: str,
        headers: list[tuple[str, str]],
        body: dict[str, object],
    ) -> Target:
        host, _, port = url.removeprefix("http://").rpartition(":")
        data = json.dumps(body, separators=(",", ":")).encode()
        return cls(
            via=via,
            api="anthropic" if path == "/v1/messages" else "openai",
            host=host,
            port=int(port),
            stream=body.get("stream") is True,
            request=encode_request("POST", host, int(port), path, headers, data),
        )


@final
@dataclass(frozen=True, slots=True)
class Abort:
    """Leave after ``after_s`` seconds, or after ``after_tokens`` content events."""

    after_s: float | None = None
    after_tokens: int | None = None


@final
@dataclass(slots=True)
class Outcome:
    """One request as its client experienced it (trio clock seconds)."""

    intended: float
    sent: float
    done: float
    status: int  # 0: no HTTP status (connection failure, or aborted before the head)
    kind: Kind
    code: str | None = None  # the error body's ``code`` (or ``type``), if any
    first_content: float | None = None
    content_times: list[float] = field(default_factory=list)
    event_times: list[float] = field(default_factory=list)  # streams: every SSE event
    body_bytes: int = 0  # streams: the body's bytes (chunk framing excluded)
    abort_at: float | None = None  # time.monotonic() when the client left
    server_timing: bytes | None = None
    request_id: bytes | None = None  # the upstream's, as the simulator or the proxy relays it

    @property
    def latency(self) -> float:
        return self.done - self.intended

    @property
    def ttft(self) -> float | None:
        return None if self.first_content is None else self.first_content - self.intended


@final
@dataclass
class Tally:
    """Live counters for the progress display (read while the driver runs)."""

    offered: int = 0
    sent: int = 0
    ok: int = 0
    shed: int = 0
    error: int = 0
    aborted: int = 0
    unsent: int = 0
    in_flight: int = 0

    def count(self, outcome: Outcome) -> None:
        setattr(self, outcome.kind, getattr(self, outcome.kind) + 1)


@final
@dataclass
class Run:
    """What a driver did: every outcome, and the arrivals it could not send."""

    outcomes: list[Outcome]
    started: float
    finished: float
    offered: int
    unsent_late: int = 0
    unsent_bound: int = 0
    mode: Literal["closed", "open"] = "closed"
    concurrency: int | None = None
    rate: float | None = None

    @property
    def wall(self) -> float:
        return self.finished - self.started


def _error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    if not isinstance(error, dict):
        return None
    code = error.get("code") or error.get("type")
    return code if isinstance(code, str) else None


def _classify(head: Head, code: str | None) -> Kind:
    if head.status == 200:
        return "ok"
    if head.status in (429, 503) and code in SHED_CODES:
        return "shed"
    return "error"


async def call(pool: Pool, target: Target, intended: float, abort: Abort | None = None) -> Outcome:
    """Send ``target``'s request once and follow it to its end (or to the abort).

    Never raises for what the server or the network did: those are outcomes. Cancellation
    of the caller propagates (the connection is closed, as a client leaving would).
    """
    sent = trio.current_time()
    outcome = Outcome(intended, sent, sent, 0, "error")
    conn = None
    try:
        conn = await pool.acquire()
        with trio.move_on_after(REQUEST_TIMEOUT_S) as timeout:
            if abort is not None and abort.after_s is not None:
                with trio.move_on_after(abort.after_s) as leave:
                    await _exchange(conn, target, outcome, abort)
                if leave.cancelled_caught:
                    outcome.kind = "aborted"
            else:
                await _exchange(conn, target, outcome, abort)
        if timeout.cancelled_caught:
            outcome.kind, outcome.code = "error", "client_timeout"
    except (OSError, ProtocolError, trio.BrokenResourceError) as exc:
        outcome.kind, outcome.code = "error", type(exc).__name__
    finally:
        outcome.done = trio.current_time()
        if outcome.kind == "aborted":
            outcome.abort_at = time.monotonic()
        if conn is not None:
            await pool.release(conn)  # closes it unless the exchange ended cleanly
    return outcome


async def _exchange(
    conn: Connection, target: Target, outcome: Outcome, abort: Abort | None
) -> None:
    await conn.send(target.request)
    head = await conn.read_head()
    outcome.status = head.status
    outcome.server_timing = head.headers.get(b"server-timing")
    outcome.request_id = head.headers.get(b"request-id") or head.headers.get(b"x-request-id")
    if head.status != 200 or not target.stream:
        body = await conn.read_body(head)
        outcome.code = None if head.status == 200 else _error_code(body[:_ERROR_BODY_KEEP])
        outcome.kind = _classify(head, outcome.code)
        return
    leave_after = None if abort is None else abort.after_tokens
    if not await follow_stream(conn, head, target, outcome, leave_after=leave_after):
        outcome.kind = "aborted"
        return  # the connection is not reusable: release() closes it
    outcome.kind = "ok"


async def follow_stream(
    conn: Connection,
    head: Head,
    target: Target,
    outcome: Outcome,
    *,
    leave_after: int | None = None,
    ending: StreamEnding | None = None,
) -> bool:
    """Read a 200 stream's body, stamping each SSE event and content event in ``outcome``
    as it arrives (and feeding ``ending``, if given); False if the client left after
    ``leave_after`` content events instead of reading to the end."""
    content = ContentCounter(target.api)
    events = EventCounter()
    times, event_times = outcome.content_times, outcome.event_times
    try:
        async for piece in conn.body(head):
            now = trio.current_time()
            if ended := events.feed(piece):
                event_times.extend([now] * ended)
            if found := content.feed(piece):
                if outcome.first_content is None:
                    outcome.first_content = now
                times.extend([now] * found)
                if leave_after is not None and content.count >= leave_after:
                    return False
            if ending is not None:
                ending.feed(piece)
    finally:
        outcome.body_bytes = events.bytes
    return True


async def tallied(
    tally: Tally, outcomes: list[Outcome], request: Callable[[], Awaitable[Outcome]]
) -> None:
    """Run one client request, counted in ``tally`` while in flight and once it ended."""
    tally.offered += 1
    tally.sent += 1
    tally.in_flight += 1
    try:
        outcome = await request()
    finally:
        tally.in_flight -= 1
    outcomes.append(outcome)
    tally.count(outcome)


@final
class Quota:
    """How many more requests closed loops sharing it may send: a load stated as a number
    of requests rather than a duration, however many loops (and servers) split it."""

    def __init__(self, requests: int) -> None:
        self.left = requests

    def take(self) -> bool:
        """One request's worth, if any is left."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


async def closed_loop(
    pool: Pool,
    target: Target,
    *,
    workers: int,
    duration: float | None = None,
    quota: Quota | None = None,
    tally: Tally | None = None,
) -> Run:
    """``workers`` clients back to back for ``duration`` seconds, or until ``quota`` is
    spent (whichever comes first when both are given); requests still in flight at the end
    are waited for and counted."""
    if duration is None and quota is None:
        raise ValueError("closed_loop needs duration or quota")
    tally = tally if tally is not None else Tally()
    outcomes: list[Outcome] = []
    start = trio.current_time()
    stop_at = math.inf if duration is None else start + duration

    async def worker() -> None:
        while trio.current_time() < stop_at and (quota is None or quota.take()):
            await tallied(tally, outcomes, lambda: call(pool, target, trio.current_time()))

    async with trio.open_nursery() as nursery:
        for _ in range(workers):
            nursery.start_soon(worker)
    return Run(
        outcomes,
        start,
        trio.current_time(),
        offered=len(outcomes),
        mode="closed",
        concurrency=workers,
    )


async def open_loop(
    pool: Pool,
    target: Target | Callable[[int], Target],
    *,
    rate: float,
    count: int | None = None,
    duration: float | None = None,
    max_in_flight: int = 2000,
    max_lag: float = 1.0,
    abort_for: Callable[[int], Abort | None] | None = None,
    tally: Tally | None = None,
    start_at: float | None = None,
) -> Run:
    """Arrivals at ``rate`` per second (``count`` of them, or for ``duration`` seconds).

    Arrival ``i`` is intended at ``start + i / rate``; its latency counts from then. It is
    not sent (and counted) if the scheduler reaches it more than ``max_lag`` seconds late,
    or while ``max_in_flight`` requests are already out.
    """
    if count is None:
        if duration is None:
            raise ValueError("open_loop needs count or duration")
        count = max(1, math.floor(rate * duration))
    tally = tally if tally is not None else Tally()
    outcomes: list[Outcome] = []
    start = trio.current_time() + 0.005 if start_at is None else start_at
    late = bound = 0
    in_flight = 0

    async def one(i: int, intended: float) -> None:
        nonlocal in_flight
        tgt = target(i) if callable(target) else target
        try:
            outcome = await call(pool, tgt, intended, abort_for(i) if abort_for else None)
        finally:
            in_flight -= 1
            tally.in_flight -= 1
        outcomes.append(outcome)
        tally.count(outcome)

    async with trio.open_nursery() as nursery:
        for i in range(count):
            intended = start + i / rate
            await trio.sleep_until(intended)
            tally.offered += 1
            if trio.current_time() - intended > max_lag:
                late += 1
                tally.unsent += 1
                continue
            if in_flight >= max_in_flight:
                bound += 1
                tally.unsent += 1
                continue
            in_flight += 1
            tally.in_flight += 1
            tally.sent += 1
            nursery.start_soon(one, i, intended)
    return Run(
        outcomes,
        start,
        trio.current_time(),
        offered=count,
        unsent_late=late,
        unsent_bound=bound,
        mode="open",
        rate=rate,
    )


def closed_driver(
    pool: Pool, target: Target, workers: int, seconds: float
) -> Callable[[Tally], Awaitable[Run]]:
    """A ``closed_loop`` of ``workers`` for ``seconds``, as a phase's driver takes it."""

    async def drive(tally: Tally) -> Run:
        return await closed_loop(pool, target, workers=workers, duration=seconds, tally=tally)

    return drive
