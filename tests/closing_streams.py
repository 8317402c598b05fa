"""Response streams of the tests' HTTP clients close their iterators when they are closed.

The tests' clients (httpx2, and the openai and anthropic SDKs on top of it) read responses
through httpcore2's connection pool. Its ``PoolByteStream`` hands out an async iterator over
the connection's stream (in 2.17, the connection's own async generator; in 2.16, a wrapper
generator) and never closes it: a response closed before its body ended -- the openai SDK
stops at ``[DONE]``, a test leaves a stream midway -- leaves that generator suspended, and
trio warns (``ResourceWarning``) when the garbage collector finds it, in whichever test runs
then. The responses themselves are closed (``async with``, ``aclosing``, the SDK's own
``finally``); what was missing is the pool stream closing the iterator it handed out.

``install()`` makes ``PoolByteStream.__aiter__`` return a plain async iterator (not a
generator, so nothing is left for the collector) that ``PoolByteStream.aclose`` closes
first. This is test support only: the gateway never uses httpcore2's pool
(``trio_batcher/upstream/pool.py`` closes the streams it iterates itself).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from httpcore2._async.connection_pool import PoolByteStream

__all__ = ["install"]


class _ClosingIterator:
    """Iterates ``source``; ``aclose`` closes the iterator it made, if any."""

    def __init__(self, source: AsyncIterable[bytes]) -> None:
        self._source = source
        self._iterator: AsyncIterator[bytes] | None = None

    def __aiter__(self) -> _ClosingIterator:
        return self

    async def __anext__(self) -> bytes:
        if self._iterator is None:
            self._iterator = aiter(self._source)
        return await anext(self._iterator)

    async def aclose(self) -> None:
        iterator, self._iterator = self._iterator, None
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()


def install() -> None:
    if getattr(PoolByteStream, "_closes_its_iterator", False):
        return
    original_aclose = PoolByteStream.aclose

    def __aiter__(self: Any) -> _ClosingIterator:
        # A stream may be iterated more than once (the openai SDK drains what follows
        # ``[DONE]`` with a second loop): every iterator handed out is closed.
        iterator = _ClosingIterator(self._stream)
        self.__dict__.setdefault("_handed_out", []).append(iterator)
        return iterator

    async def aclose(self: Any) -> None:
        if not self._closed:
            for iterator in self.__dict__.pop("_handed_out", ()):
                await iterator.aclose()
        await original_aclose(self)

    PoolByteStream.__aiter__ = __aiter__  # type: ignore[assignment,method-assign]
    PoolByteStream.aclose = aclose  # type: ignore[method-assign]
    PoolByteStream._closes_its_iterator = True  # type: ignore[attr-defined]
