"""One soak request as its client lives it, leaving where the plan says, and the pool.

A request is sent over a kept-alive connection (``FreshPool``) and followed to its end:
an answer read whole, or the client leaving on purpose (``soak_plan.Leave``):

- ``before_body`` / ``reset_mid_body``: half the body is sent, then the connection is
  closed in order, or reset (RST). The proxy cannot have answered: it is still reading.
- ``in_flight``: the whole request is sent; if no byte of the answer has arrived after
  ``after_s``, the client closes. The simulator holds such calls for
  ``soak_plan.HELD_CALL_MS``, longer than any ``after_s``, so a success can never cross
  the leaving; what can is an answer the proxy gives at once (a shed), and that is read
  rather than abandoned when its first byte is already there (``Connection.answer_within``).
- ``mid_stream``: after ``after_events`` content events of a slow stream, unless the
  stream already ended in the same read.

Never raises for what the server or the network did: a request with no answer the client
could read is a ``failed`` result, which the soak's first check counts against it.
"""

from __future__ import annotations

from collections import deque
from typing import Final, final

import trio

from .soak_ledger import LEFT, Result, classify
from .soak_plan import Planned
from .sse import ContentCounter, StreamEnding
from .wire import Connection, ProtocolError

__all__ = ["CLIENT_TIMEOUT_S", "FreshPool", "soak_call"]

CLIENT_TIMEOUT_S: Final = 60.0
# Idle connections older than this are closed, not reused: hypercorn closes a keep-alive
# connection after 5 s idle, and a request sent on one it is closing would be lost.
IDLE_MAX_S: Final = 2.0


@final
class FreshPool:
    """Kept-alive connections to one ``host:port``, most recently used first, none reused
    after ``IDLE_MAX_S`` idle."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._idle: deque[tuple[Connection, float]] = deque()
        self.opened = 0

    async def acquire(self) -> Connection:
        now = trio.current_time()
        while self._idle:
            conn, since = self._idle.pop()
            if now - since < IDLE_MAX_S:
                return conn
            await conn.aclose()
        stream = await trio.open_tcp_stream(self.host, self.port)
        self.opened += 1
        return Connection(stream)

    async def prefill(self, n: int, at_once: int = 25) -> None:
        """Open connections until ``n`` are idle, ``at_once`` at a time: a burst of
        requests should meet the gate, not the listen backlog (hypercorn's is 100)."""
        limit = trio.CapacityLimiter(at_once)

        async def one() -> None:
            async with limit:
                stream = await trio.open_tcp_stream(self.host, self.port)
            self.opened += 1
            self._idle.append((Connection(stream), trio.current_time()))

        async with trio.open_nursery() as nursery:
            for _ in range(n - len(self._idle)):
                nursery.start_soon(one)

    async def release(self, conn: Connection) -> None:
        if conn.reusable:
            self._idle.append((conn, trio.current_time()))
        else:
            await conn.aclose()

    async def prune(self) -> None:
        """Close the connections idle for longer than ``IDLE_MAX_S`` (oldest first)."""
        now = trio.current_time()
        while self._idle and now - self._idle[0][1] >= IDLE_MAX_S:
            conn, _ = self._idle.popleft()
            await conn.aclose()

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def aclose(self) -> None:
        while self._idle:
            conn, _ = self._idle.popleft()
            await conn.aclose()


async def soak_call(pool: FreshPool, planned: Planned) -> Result:
    """Send ``planned`` and follow it to its end; see the module docstring."""
    conn = None
    try:
        conn = await pool.acquire()
        with trio.move_on_after(CLIENT_TIMEOUT_S):
            return await _exchange(conn, planned)
        return Result("failed", reason="client_timeout")
    except (OSError, ProtocolError, trio.BrokenResourceError) as exc:
        return Result("failed", reason=f"{type(exc).__name__}: {str(exc)[:80]}")
    finally:
        if conn is not None:
            await pool.release(conn)


async def _exchange(conn: Connection, planned: Planned) -> Result:
    leave = planned.leave
    if leave is not None and leave.stage in ("before_body", "reset_mid_body"):
        body = len(planned.request) - planned.body_offset
        await conn.send(planned.request[: planned.body_offset + body // 2])
        await trio.sleep(leave.after_s)
        if leave.stage == "reset_mid_body":
            conn.reset_on_close()
        await conn.aclose()
        return Result("left", 0, LEFT, leave.stage)
    await conn.send(planned.request)
    if (
        leave is not None
        and leave.stage == "in_flight"
        and not await conn.answer_within(leave.after_s)
    ):
        await conn.aclose()
        return Result("left", 0, LEFT, "in_flight")
    head = await conn.read_head()
    if head.status != 200 or not planned.stream:
        return classify(planned.api, head.status, await conn.read_body(head))
    ending = StreamEnding(planned.api)
    content = ContentCounter(planned.api)
    leave_after = leave.after_events if leave is not None and leave.stage == "mid_stream" else 0
    async for piece in conn.body(head):
        ending.feed(piece)
        counted = content.feed(piece) if leave_after else 0
        ended = ending.complete or ending.error_type is not None
        if counted and content.count >= leave_after and not ended:
            await conn.aclose()
            return Result("left", 200, LEFT, "mid_stream")
    if not ending.complete and ending.error_type is None:
        return Result("failed", 200, reason="stream ended with neither its end nor an error")
    return classify(
        planned.api, 200, stream_error=ending.error_type, stream_message=ending.error_message
    )
