"""A lean HTTP/1.1 client for the load generator: pre-encoded requests over kept-alive sockets.

Why not httpx2 here: on this 2-core machine the load generator, the proxy and the simulator
share the CPU, so every millisecond the client spends is taken from the thing being
measured. httpx2 (request/response models, header normalisation, a pool) spent ~2.3 ms of
CPU per request in the client here; this module spends ~0.35 ms. It speaks exactly what the
benchmark needs from our own two servers (hypercorn): ``Content-Length`` and ``chunked``
bodies, keep-alive, ``Connection: close``. It is not a general HTTP client.

A ``Connection`` is used by one task at a time; ``Pool`` hands out idle connections and
opens new ones on demand (the load drivers bound concurrency, not the pool). A connection
whose exchange did not end cleanly -- error, cancellation, an abort -- is closed, never
returned, so a half-read response can never be mistaken for the next one.
"""

from __future__ import annotations

import json
import select
import socket
import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Final, final

import trio

__all__ = ["Connection", "Head", "Pool", "ProtocolError", "encode_request", "get_json"]

_READ: Final = 65536
_MAX_HEAD: Final = 65536


@final
class ProtocolError(Exception):
    """The peer closed early or sent something that is not the HTTP/1.1 we expect."""


def encode_request(
    method: str, host: str, port: int, path: str, headers: Sequence[tuple[str, str]], body: bytes
) -> bytes:
    """The whole request as bytes, built once and sent as many times as needed."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@final
@dataclass(frozen=True, slots=True)
class Head:
    """A response's status line and headers (names lower-cased)."""

    status: int
    headers: dict[bytes, bytes]


@final
class Connection:
    """One kept-alive HTTP/1.1 connection; one exchange at a time."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buf = bytearray()
        self.reusable = True

    async def _fill(self) -> None:
        data = await self._stream.receive_some(_READ)
        if not data:
            self.reusable = False
            raise ProtocolError("connection closed by the server")
        self._buf += data

    async def send(self, request: bytes) -> None:
        """Send a request; the connection is unusable until its response is read to the end."""
        self.reusable = False
        await self._stream.send_all(request)

    async def read_head(self) -> Head:
        buf = self._buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            if len(buf) > _MAX_HEAD:
                raise ProtocolError("response head too large")
            await self._fill()
        lines = bytes(buf[:end]).split(b"\r\n")
        del buf[: end + 4]
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise ProtocolError(f"bad status line {lines[0][:80]!r}") from None
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return Head(status, headers)

    async def body(self, head: Head) -> AsyncIterator[bytes]:
        """The body's pieces as they arrive; when it is exhausted the connection is reusable
        again (unless the server said ``Connection: close``)."""
        headers = head.headers
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            async for piece in self._chunked():
                yield piece
        elif (length := headers.get(b"content-length")) is not None:
            remaining = int(length)
            buf = self._buf
            while remaining:
                if not buf:
                    await self._fill()
                take = min(remaining, len(buf))
                piece = bytes(buf[:take])
                del buf[:take]
                remaining -= take
                yield piece
        else:
            raise ProtocolError("response without a length (close-delimited bodies unsupported)")
        self.reusable = headers.get(b"connection", b"").lower() != b"close"

    async def _chunked(self) -> AsyncIterator[bytes]:
        buf = self._buf
        while True:
            while (end := buf.find(b"\r\n")) < 0:
                await self._fill()
            try:
                size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError("bad chunk size line") from None
            del buf[: end + 2]
            if size == 0:
                while (end := buf.find(b"\r\n")) != 0:  # trailers, then the empty line
                    if end > 0:
                        del buf[: end + 2]
                    else:
                        await self._fill()
                del buf[:2]
                return
            while len(buf) < size + 2:
                await self._fill()
            piece = bytes(buf[:size])
            del buf[: size + 2]
            yield piece

    async def read_body(self, head: Head) -> bytes:
        return b"".join([piece async for piece in self.body(head)])

    async def answer_within(self, seconds: float) -> bool:
        """Whether the response starts arriving within ``seconds``. When the time is up, a
        last look without yielding catches an answer that arrived at the very end, so a
        client that leaves on ``False`` leaves only what had not been answered yet."""
        if self._buf:
            return True
        with trio.move_on_after(seconds):
            await trio.lowlevel.wait_readable(self._stream.socket)
            return True
        poller = select.poll()  # not select.select(): descriptors past 1023 are common here
        poller.register(self._stream.socket.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    def reset_on_close(self) -> None:
        """Make the next ``aclose`` reset the connection (RST, SO_LINGER 0) instead of
        closing it in order: a connection that drops, as opposed to a client that leaves."""
        self.reusable = False
        self._stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    async def aclose(self) -> None:
        self.reusable = False
        with trio.CancelScope(shield=True):
            await self._stream.aclose()


@final
class Pool:
    """Idle connections to one ``host:port``; opens more when none is idle."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._idle: list[Connection] = []
        self.opened = 0

    async def acquire(self) -> Connection:
        if self._idle:
            return self._idle.pop()
        stream = await trio.open_tcp_stream(self.host, self.port)  # sets TCP_NODELAY
        self.opened += 1
        return Connection(stream)

    async def release(self, conn: Connection) -> None:
        """Keep ``conn`` for reuse if its last exchange ended cleanly, else close it."""
        if conn.reusable:
            self._idle.append(conn)
        else:
            await conn.aclose()

    async def prefill(self, n: int) -> None:
        """Open connections until ``n`` are idle, concurrently (so a burst pays no connects)."""
        missing = n - len(self._idle)
        if missing <= 0:
            return

        async def one() -> None:
            stream = await trio.open_tcp_stream(self.host, self.port)
            self.opened += 1
            self._idle.append(Connection(stream))

        async with trio.open_nursery() as nursery:
            for _ in range(missing):
                nursery.start_soon(one)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.aclose()


async def get_json(pool: Pool, request: bytes) -> object:
    """Send a pre-encoded GET and decode its JSON body (the cheap poll the burst trace uses).

    Raises:
      ProtocolError: a non-200 answer.
    """
    conn = await pool.acquire()
    try:
        await conn.send(request)
        head = await conn.read_head()
        body = await conn.read_body(head)
    finally:
        await pool.release(conn)
    if head.status != 200:
        raise ProtocolError(f"GET answered {head.status}")
    return json.loads(body)
