"""Keep-alive HTTP/1.1 connections to the one upstream origin, on httpcore2.

Why not ``httpx2.AsyncClient``: a proxy sends every request to the same origin, with the
same headers, and needs none of what the client layer adds on top of the transport
(request/response models with header normalisation, auth and redirect hooks, cookies, URL
merging). Measured on the 2-core reference machine at 50 concurrent calls to the simulator
answering in 50 ms, the client layer and the transport's general-purpose pool cost 2.1 ms of
CPU per call; httpcore2's connections (the httpx2 family's transport, the same code that
reads and writes the bytes under ``httpx2``) with this pool cost 1.0 ms. That millisecond is
most of a proxied request's budget.

Theory of operation
-------------------
The pool is a LIFO stack of idle ``httpcore2.AsyncHTTPConnection`` objects. ``request``
pops the most recently used connection, checks only that one (its keep-alive time, and
its socket: readable on an idle HTTP/1.1 connection can only mean the server closed it;
checked here on our own stream, since httpcore2 2.17 stopped doing it in ``has_expired``),
and opens a new connection when the stack is empty. httpcore2's own pool instead
re-examines every pooled connection on every request and again on every response close,
which is the bookkeeping it spends its time on.

A request is billable, so the pool sends it a second time only when it can prove the first
never reached the upstream: the reused connection was found closed before anything was
written, or the first write of the request (its head, one small ``send``) failed. The check
cannot see a close still on its way (the upstream's idle timeout firing as we reuse the
connection, or a draining load balancer resetting it after reading the whole request): a
connection that fails after any part of the request went out raises to the caller, whose
retry policy decides, waits, spends its budget and counts the resend
(``upstream/resilience``). ``resent_unsent`` counts the pool's own, provably harmless, resends.

Bytes move through ``_TrioNetworkStream``, a network backend for httpcore2 (its documented
extension point) that differs from httpcore2's own trio backend in one way: a read or write
with no timeout runs bare, without a cancel scope and an exception-mapping context manager
around it -- once per read and write, which came to 7.6% of the proxy's samples in a
streaming profile. The proxy passes no read or write timeout: every upstream byte is already under
the request's deadline.

There is no cap on open connections: the admission gate and the dispatcher's limiter bound
concurrency (with both off, the clients do), so a request never waits here. At most
``max_idle`` idle connections are kept.

A response owns its connection until ``aclose``. Only a response read to its end leaves
the connection idle (httpcore2 tracks the HTTP/1.1 state), and only then does it go back on
the stack; closing one early -- a client that left, a cancelled call -- closes the socket,
which is how the upstream learns the call was abandoned. ``aclose`` runs shielded, so
cancellation cannot leak a half-read connection into the stack.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Iterable,
    Iterator,
    Mapping,
)
from contextlib import aclosing
from typing import Any, Final, Protocol, cast, final

import httpcore2
import trio

_KEEPALIVE_EXPIRY_S: Final = 30.0
# How a kept-alive connection that the server had closed fails when a request is sent on it:
# "server disconnected without sending a response", or a reset on the write or the read.
# ``ConnectionNotAvailable`` is httpcore2's own (2.17+) check finding the socket closed before
# it wrote anything.
_STALE_ERRORS: Final = (
    httpcore2.RemoteProtocolError,
    httpcore2.ReadError,
    httpcore2.WriteError,
    httpcore2.ConnectionNotAvailable,
)


class SizedBody(Protocol):
    """A streamed request body of a known length (``upstream.file_body.FileBody``)."""

    def __len__(self) -> int: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...


@final
class _HeldBody:
    """A bytes request body that can be let go of once the answer has started.

    httpcore2 keeps a request (and its body) referenced from the response it returns for as
    long as that response is read; for a stream that is minutes, and an agent's request
    body is often its whole conversation. ``UpstreamPool.request`` lets go of it once the
    response headers are in, when the body can no longer be sent again.
    """

    __slots__ = ("_content", "_size")

    def __init__(self, content: bytes) -> None:
        self._content: bytes | None = content
        self._size = len(content)

    def __len__(self) -> int:
        return self._size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._content is None:
            raise RuntimeError("the request body was already let go of")
        yield self._content

    def release(self) -> None:
        self._content = None


@final
class Headers(Mapping[str, str]):
    """Response headers by lower-case name; repeated headers joined with ``", "``."""

    __slots__ = ("_items",)

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        items: dict[str, str] = {}
        for name, value in raw:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            items[key] = f"{items[key]}, {text}" if key in items else text
        self._items = items

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self._items.get(name.lower(), default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


_READ_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError)


@final
class _Wire:
    """What one connection has written, for the pool's "was anything sent?" question.

    Shared by a connection's TCP stream and the TLS stream on top of it. ``writes`` counts
    writes that completed. httpcore2 swallows a failed write (it goes on to read, for a
    server that answers early), so the error it raises cannot tell a request that never
    left from one the upstream read whole; this count can.
    """

    __slots__ = ("socket", "writes")

    def __init__(self) -> None:
        self.writes = 0
        self.socket: trio.socket.SocketType | None = None

    def closed_by_peer(self) -> bool:
        """On an idle connection, a readable socket can only be the server's close."""
        return self.socket is not None and self.socket.is_readable()


@final
class _TrioNetworkStream(httpcore2.AsyncNetworkStream):
    """A trio stream as httpcore2 sees it, with no per-call overhead when no timeout is set."""

    def __init__(
        self, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream], wire: _Wire
    ) -> None:
        self._stream = stream
        self._wire = wire

    # The ``timeout`` parameters below are httpcore2's interface, not ours.
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        try:
            if timeout is None:
                return cast(bytes, await self._stream.receive_some(max_bytes))
            with trio.fail_after(timeout):
                return cast(bytes, await self._stream.receive_some(max_bytes))
        except trio.TooSlowError:
            raise httpcore2.ReadTimeout("timed out reading from the upstream") from None
        except _READ_ERRORS as exc:
            raise httpcore2.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        try:
            if timeout is None:
                await self._stream.send_all(buffer)
            else:
                with trio.fail_after(timeout):
                    await self._stream.send_all(buffer)
        except trio.TooSlowError:
            raise httpcore2.WriteTimeout("timed out writing to the upstream") from None
        except _READ_ERRORS as exc:
            raise httpcore2.WriteError(str(exc) or type(exc).__name__) from exc
        self._wire.writes += 1

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore2.AsyncNetworkStream:
        assert isinstance(self._stream, trio.SocketStream)
        tls = trio.SSLStream(
            self._stream,
            ssl_context=ssl_context,
            server_hostname=server_hostname,
            https_compatible=True,
        )
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                await tls.do_handshake()
        except trio.TooSlowError:
            await self.aclose()
            raise httpcore2.ConnectTimeout("timed out in the TLS handshake") from None
        except (*_READ_ERRORS, OSError) as exc:
            await self.aclose()
            raise httpcore2.ConnectError(f"TLS handshake failed: {exc}") from exc
        return _TrioNetworkStream(tls, self._wire)

    def _socket_stream(self) -> trio.SocketStream:
        stream = self._stream
        return stream.transport_stream if isinstance(stream, trio.SSLStream) else stream

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return getattr(self._stream, "_ssl_object", None)
        if info == "is_readable":
            return self._socket_stream().socket.is_readable()
        if info == "socket":
            return self._socket_stream().socket
        if info == "client_addr":
            return self._socket_stream().socket.getsockname()
        if info == "server_addr":
            return self._socket_stream().socket.getpeername()
        return None


@final
class _TrioNetworkBackend(httpcore2.AsyncNetworkBackend):
    """Opens one connection's socket, and keeps its ``_Wire`` for the pool to read."""

    __slots__ = ("wire",)

    def __init__(self) -> None:
        self.wire = _Wire()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                stream = await trio.open_tcp_stream(host, port, local_address=local_address)
        except trio.TooSlowError:
            raise httpcore2.ConnectTimeout(f"timed out connecting to {host}:{port}") from None
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc) or type(exc).__name__) from exc
        for option in socket_options or ():
            stream.setsockopt(*option)
        self.wire.socket = stream.socket
        return _TrioNetworkStream(stream, self.wire)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


@final
class _Link:
    """One upstream connection and the ``_Wire`` that says what it has written."""

    __slots__ = ("conn", "wire")

    def __init__(self, conn: httpcore2.AsyncHTTPConnection, wire: _Wire) -> None:
        self.conn = conn
        self.wire = wire

    def reusable_now(self) -> bool:
        """Idle, within its keep-alive time, and not closed by the server meanwhile."""
        conn = self.conn
        return conn.is_available() and not conn.has_expired() and not self.wire.closed_by_peer()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.conn.aclose()


@final
class PooledResponse:
    """An upstream response whose body has not been read yet; always ``aclose`` it."""

    def __init__(self, pool: UpstreamPool, link: _Link, raw: httpcore2.Response) -> None:
        self._pool = pool
        self._conn: _Link | None = link
        self._raw = raw
        self.status_code = raw.status
        self.headers = Headers(raw.headers)

    async def aiter_raw(self) -> AsyncGenerator[bytes, None]:
        """The body as it arrives. Raises httpcore2's errors."""
        chunks = aiter(cast(AsyncIterable[bytes], self._raw.stream))
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            # httpcore2's body iterator is an async generator: close it here, not in the
            # garbage collector, when the body is left unread (cancelled, or closed early).
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()

    async def read(self, limit: int) -> bytes:
        """The body, or its first bytes once it passes ``limit``: then more than ``limit``
        bytes come back and the rest is never read (``aclose`` drops the connection).
        Raises httpcore2's errors."""
        parts: list[bytes] = []
        size = 0
        async with aclosing(self.aiter_raw()) as chunks:
            async for chunk in chunks:
                parts.append(chunk)
                size += len(chunk)
                if size > limit:
                    break
        return b"".join(parts)

    async def aclose(self) -> None:
        """Release the connection: back to the pool if the body was read to its end,
        closed otherwise. Idempotent; shielded from cancellation."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with trio.CancelScope(shield=True):
            await self._raw.aclose()
            await self._pool._release(conn)


@final
class UpstreamPool:
    """Connections to one origin (``base_url``), reused most-recently-used first.

    ``connect_timeout`` bounds opening a connection (and its TLS handshake, verified against
    the system's CAs unless ``ssl_context`` says otherwise). ``read`` and
    ``write`` timeouts, if given, bound each read and write (so a slow stream is fine as long
    as bytes keep coming); by default there are none, because the caller's cancel scope is
    the deadline.
    """

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float,
        read_timeout: float | None = None,
        write_timeout: float | None = None,
        max_idle: int = 256,
        keepalive_expiry: float = _KEEPALIVE_EXPIRY_S,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        url = httpcore2.URL(base_url)
        if url.scheme not in (b"http", b"https"):
            raise ValueError(f"unsupported upstream scheme in {base_url!r}")
        self._origin = url.origin
        self._base_path = url.target.rstrip(b"/")
        default_port = 443 if url.scheme == b"https" else 80
        host = url.host
        if url.port is not None and url.port != default_port:
            host += b":%d" % url.port
        self._host_header = host
        if url.scheme == b"https" and ssl_context is None:
            ssl_context = httpcore2.default_ssl_context()  # system CAs, verified
        self._ssl_context = ssl_context
        self._timeouts = {
            "connect": connect_timeout,
            "read": read_timeout,
            "write": write_timeout,
            "pool": None,
        }
        self._keepalive_expiry = keepalive_expiry
        self._max_idle = max_idle
        self._idle: list[_Link] = []
        self._closed = False
        self.connections_opened = 0
        # Requests sent again on a new connection because the reused one provably never
        # carried them (closed before the first write, or the first write failed).
        self.resent_unsent = 0

    def url(self, path: str) -> httpcore2.URL:
        """The absolute URL of ``path`` (which starts with ``/``) under the base URL."""
        return httpcore2.URL(
            scheme=self._origin.scheme,
            host=self._origin.host,
            port=self._origin.port,
            target=self._base_path + path.encode("ascii"),
        )

    async def request(
        self,
        method: bytes,
        url: httpcore2.URL,
        headers: list[tuple[bytes, bytes]],
        content: bytes | SizedBody,
    ) -> PooledResponse:
        """Send one request; returns once the response headers are in.

        ``headers`` must not include ``Host`` or ``Content-Length``; they are added here.
        ``content`` is bytes or a ``SizedBody`` (streamed, and iterable again should the
        request go out a second time on a new connection).
        Raises httpcore2's ``TimeoutException``, ``NetworkError`` or ``ProtocolError``.
        """
        if self._closed:
            raise httpcore2.ConnectError("the upstream pool is closed")
        all_headers = [
            (b"host", self._host_header),
            *headers,
            (b"content-length", b"%d" % len(content)),
        ]
        held = _HeldBody(content) if isinstance(content, bytes) else None
        request = httpcore2.Request(
            method,
            url,
            headers=all_headers,
            content=content if held is None else held,
            extensions={"timeout": self._timeouts},
        )
        link, reused = await self._acquire()
        while True:
            written = link.wire.writes
            try:
                raw = await link.conn.handle_async_request(request)
            except _STALE_ERRORS as exc:
                await link.aclose()
                if not (reused and _never_sent(link.wire, written)):
                    if isinstance(exc, httpcore2.ConnectionNotAvailable):
                        raise httpcore2.RemoteProtocolError(str(exc)) from exc
                    raise
                # A kept-alive connection the upstream had closed before it carried a byte
                # of this request (its idle timeout, seen too late for ``_acquire``): the
                # request cannot have been read, so it goes again, at once, on a new one.
                self.resent_unsent += 1
                link, reused = self._connect(), False
            except BaseException:
                await link.aclose()
                raise
            else:
                if held is not None:
                    held.release()  # answered: it cannot go out again, and need not stay
                return PooledResponse(self, link, raw)

    async def _acquire(self) -> tuple[_Link, bool]:
        """The most recently used idle connection that still looks alive (and True), or a
        new one (and False). Dead ones found on the way are closed."""
        idle = self._idle
        while idle:
            link = idle.pop()
            if link.reusable_now():
                return link, True
            await link.aclose()
        return self._connect(), False

    def _connect(self) -> _Link:
        self.connections_opened += 1
        backend = _TrioNetworkBackend()
        conn = httpcore2.AsyncHTTPConnection(
            self._origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=backend,
        )
        return _Link(conn, backend.wire)

    async def _release(self, link: _Link) -> None:
        conn = link.conn
        reusable = conn.is_idle() and not conn.is_closed() and not self._closed
        if reusable and len(self._idle) < self._max_idle:
            self._idle.append(link)
            return
        await link.aclose()

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def aclose(self) -> None:
        """Close every idle connection; connections in use close when their response does."""
        self._closed = True
        idle, self._idle = self._idle, []
        for link in idle:
            await link.aclose()


def _never_sent(wire: _Wire, writes_before: int) -> bool:
    """Whether a request that failed on ``wire`` provably never reached the upstream: no
    write of it completed, and either none was tried (httpcore2 found the socket closed
    first) or the first one -- the request head, a single small ``send`` -- failed, which a
    reset socket does before the kernel takes a byte."""
    return wire.writes == writes_before
