"""What every kind of upstream answers to: the Messages calls, in Anthropic's terms.

The gateway reaches Claude through three wires -- Anthropic's own API (``client``), Amazon
Bedrock and Google Vertex AI (``kinds``) -- and everything behind the router (resilience,
the stream job, the relay, the doors) must not care which. So each kind's client offers
the same four calls, takes an ``UpstreamRequest`` whose ``model`` is already *this
upstream's* id for the model (the router mapped it: ``upstreams.config.UpstreamSpec``), and
answers as Anthropic would: an ``UpstreamReply``, a stream of Anthropic events, or a
``ProxyError`` whose status and type are Anthropic's (429/529 drive the resilience layer
alike for every kind). A protocol, not a base class: the kinds share no code through it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .request import UpstreamRequest
from .resilience import StreamEvent

if TYPE_CHECKING:
    from .client import UpstreamReply

__all__ = ["MessagesCaller", "MessagesStream"]


class MessagesStream(Protocol):
    """An open 200 stream of Anthropic events; iterate ``events()``, always ``aclose()``.

    Closing before the end drops the connection, which is how the upstream learns that the
    client left. ``started_at``/``first_byte_at`` are ``trio.current_time()`` instants.
    """

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def started_at(self) -> float: ...

    @property
    def first_byte_at(self) -> float: ...

    def events(self) -> AsyncGenerator[StreamEvent, None]: ...

    async def aclose(self) -> None: ...


class MessagesCaller(Protocol):
    """One upstream's client. ``request.model`` is the upstream's own model id."""

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        """One non-streaming call; ``ProxyError`` for anything but a message."""
        ...

    async def open_stream(self, request: UpstreamRequest) -> MessagesStream:
        """Start a streaming call; returns once the upstream answered 200."""
        ...

    async def count_tokens(self, request: UpstreamRequest) -> UpstreamReply:
        """``count_tokens``; the reply's ``message`` is ``{"input_tokens": n}``."""
        ...

    async def list_models(self) -> list[dict[str, Any]]:
        """The models this upstream lists, as Anthropic's ``GET /v1/models`` items."""
        ...

    async def aclose(self) -> None:
        """Close its connections (the app lifespan's end)."""
        ...
