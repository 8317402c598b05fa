"""Back-pressure for file uploads through Quart, so a 200 MB upload never sits in memory.

Quart reads a request's body eagerly: a task calls the server's ``receive`` in a loop and
appends every chunk to ``request.body``, however far behind the handler that consumes it
is. The Files upload streams to disk, which is slower than loopback, so without a brake the
buffer -- the process's memory -- grows toward the whole file (measured: +30 MB of RSS for
a 20 MB upload).

``UploadFlow`` sits in front of Quart for ``POST /v1/files`` only. Its ``receive`` waits
while more than ``WINDOW_BYTES`` that came in have not yet been taken by the handler;
``GatedBody`` (the request's body for that route) reports what the handler takes. The
waiting ``receive`` stops hypercorn reading the socket, so TCP's flow control slows the
client, and memory stays one window, whatever the file's size.
"""

from __future__ import annotations

from typing import Any, Final, final

import trio
from quart_trio.wrappers.request import TrioBody

from .http import Message, Receive, Scope, Send

__all__ = ["SCOPE_KEY", "WINDOW_BYTES", "GatedBody", "UploadFlow", "UploadGate"]

SCOPE_KEY: Final = "trio_batcher.upload_gate"
WINDOW_BYTES: Final = 1024 * 1024


@final
class UploadGate:
    """Bytes received but not yet taken, and a wake-up for the receiver when they drop."""

    def __init__(self, window: int = WINDOW_BYTES) -> None:
        self.window = window
        self.pending = 0
        self._taken = trio.Event()

    async def room(self) -> None:
        while self.pending >= self.window:
            self._taken = trio.Event()
            await self._taken.wait()

    def received(self, size: int) -> None:
        self.pending += size

    def taken(self, size: int) -> None:
        self.pending -= size
        self._taken.set()


@final
class UploadFlow:
    """ASGI middleware: gates the body of ``POST path``; everything else passes through."""

    def __init__(self, app: Any, path: str) -> None:
        self._app = app
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self._path:
            await self._app(scope, receive, send)
            return
        gate = UploadGate()

        async def gated() -> Message:
            await gate.room()
            message = await receive()
            if message["type"] == "http.request":
                gate.received(len(message.get("body", b"")))
            return message

        await self._app({**scope, SCOPE_KEY: gate}, gated, send)


@final
class GatedBody(TrioBody):
    """``request.body`` that tells its gate how much the handler has taken."""

    def __init__(
        self, gate: UploadGate, expected_content_length: int | None, max_content_length: int | None
    ) -> None:
        super().__init__(expected_content_length, max_content_length)
        self._gate = gate

    async def __anext__(self) -> bytes:
        data = await super().__anext__()
        self._gate.taken(len(data))
        return data
