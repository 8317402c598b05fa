"""One request's upstream attempts as CLIENT spans, for a request that is traced.

The fleet calls ``TracedAttempts.bind(steward, request)`` where it would call ``op`` on the
steward's caller; each call of what it returns is one attempt -- so the retries ``Resilience``
makes on one upstream and the failovers the fleet makes between upstreams are separate spans
alike, each saying why it was made (``first``, ``retry``, ``failover``, after which failure).
The attempt's ``traceparent`` is added to the headers sent upstream (only here: an untraced
request's headers are left as they are). A stream's span stays open past the attempt, until
the relay ends the stream (``RequestTrace.stream_ended``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Generic, TypeVar, final
from urllib.parse import urlsplit

from ..errors import ProxyError
from ..tracing import RequestTrace
from ..upstream.caller import MessagesCaller
from ..upstream.client import UpstreamReply
from ..upstream.request import UpstreamRequest
from ..upstream.resilience import StreamStart, classify
from .config import Access, AnthropicAccess, BedrockAccess, VertexAccess
from .steward import Steward

__all__ = ["TracedAttempts", "server_of"]

T = TypeVar("T")


def server_of(access: Access) -> tuple[str, int] | None:
    """The host and port an upstream's calls go to (``server.address``/``server.port``)."""
    if isinstance(access, AnthropicAccess):
        base = access.base_url
    elif isinstance(access, BedrockAccess):
        base = access.base_url or f"https://bedrock-runtime.{access.region}.amazonaws.com"
    elif isinstance(access, VertexAccess):
        base = access.base_url or f"https://{access.region}-aiplatform.googleapis.com"
    else:
        return None
    parts = urlsplit(base)
    if parts.hostname is None:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _message_start(start: StreamStart[Any]) -> Mapping[str, Any] | None:
    for name, data, _ in start.prelude:
        if (name or data.get("type")) == "message_start":
            message = data.get("message")
            return message if isinstance(message, Mapping) else None
    return None


@final
class TracedAttempts(Generic[T]):
    """The attempts of one traced request (module doc)."""

    def __init__(
        self, op: Callable[[MessagesCaller, UpstreamRequest], Awaitable[T]], trace: RequestTrace
    ) -> None:
        self._op = op
        self._trace = trace
        self._number = 0
        self._last: tuple[str, str] | None = None  # the upstream that failed last, and why

    def bind(self, steward: Steward, request: UpstreamRequest) -> Callable[[], Awaitable[T]]:
        return partial(self._run, steward, request)

    async def _run(self, steward: Steward, request: UpstreamRequest) -> T:
        self._number += 1
        last = self._last
        cause = "first" if last is None else "retry" if last[0] == steward.name else "failover"
        span = self._trace.attempt(
            model=request.model,
            body=request.body,
            content=request.content,
            upstream=steward.name,
            kind=steward.spec.kind,
            server=server_of(steward.spec.access),
            number=self._number,
            cause=cause,
            after=None if last is None else last[1],
        )
        request = replace(request, headers=(*request.headers, *span.headers()))
        try:
            value = await self._op(steward.caller, request)
        except BaseException as exc:
            span.failed(exc)
            if isinstance(exc, ProxyError):
                self._last = (steward.name, classify(exc).signal)
            raise
        if isinstance(value, StreamStart):
            span.opened(_message_start(value))
        elif isinstance(value, UpstreamReply):
            span.replied(value.message)
        else:
            span.replied({})
        return value
