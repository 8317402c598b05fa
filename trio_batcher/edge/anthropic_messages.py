"""The native Anthropic Messages door: ``POST /v1/messages`` and its ``count_tokens``.

For Claude Code, the ``anthropic`` SDKs and agents built on them, pointed at the gateway
with ``ANTHROPIC_BASE_URL``. There is nothing to translate: the client's body goes upstream
as its own bytes, with its ``anthropic-version`` and ``anthropic-beta`` headers and the
gateway's key (never the client's), and the reply or every stream event comes back as the
upstream sent it. What the gateway adds is what it adds for every door -- admission
windows, the gate, retries before the first byte, shared cooldowns, cancellation, metrics.

A request in a message thread (the threads beta) is owned by the tenant that sent it and
continued only by that tenant, on the upstream that holds it (``anthropic_threads``).

``count_tokens`` is forwarded with the same key, headers, deadline and cooldowns, but not
through the gate or a window: it generates nothing, and Claude Code sends it in bursts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, final

from ..errors import ProxyError
from ..pipeline.contract import JSONReply, StreamReply
from ..pipeline.core import Pipeline
from ..store.owned import OwnedObjects
from ..tenants import Tenant
from ..translation.anthropic_messages import (
    AnthropicMessagesCodec,
    check_count_tokens,
    check_messages,
    error_reply,
    forwarded_headers,
    relayed_headers,
)
from ..upstream.request import UpstreamRequest, outline
from ..upstreams.facts import NO_FACTS, FactsOf
from ..upstreams.fleet import PINNED_UPSTREAM_GONE
from .anthropic_files import file_ids, file_not_found
from .anthropic_threads import ThreadOwnership, thread_not_found, thread_request, with_details
from .http import Incoming

# Whether a tenant may name a file id: its own file (``AnthropicFiles.known_file``).
KnownFile = Callable[[str, Tenant | None], Awaitable[bool]]

__all__ = ["COUNT_TOKENS_PATH", "MESSAGES_PATH", "SURFACE", "CountTokensDoor", "MessagesDoor"]

MESSAGES_PATH: Final = "/v1/messages"
COUNT_TOKENS_PATH: Final = "/v1/messages/count_tokens"
SURFACE: Final = "anthropic.messages"
COUNT_TOKENS_SURFACE: Final = "anthropic.count_tokens"
_CODEC: Final = AnthropicMessagesCodec()
_BOM: Final = b"\xef\xbb\xbf"


class _AnthropicDoor:
    """What both routes share: Anthropic-shaped errors, and the client's own request."""

    relays_body: Final = True

    def __init__(self, surface: str, *, generates: bool) -> None:
        self.surface: Final = surface
        self.generates: Final = generates

    def error_reply(self, exc: ProxyError) -> JSONReply:
        status, body, headers = error_reply(exc)
        return JSONReply(body, headers, status)

    def refused(self, pipeline: Pipeline, exc: ProxyError, incoming: Incoming) -> ProxyError:
        """Count a request refused at the door (a 400 of ours) and return its error."""
        payload = incoming.payload
        stream = isinstance(payload, dict) and payload.get("stream") is True
        timing = pipeline.record_refused(
            exc.status,
            incoming.arrived,
            stream=stream,
            surface=self.surface,
            generation=self.generates,
            tenant=incoming.tenant,
        )
        exc.headers["Server-Timing"] = timing.server_timing_header()
        return exc

    def upstream_request(
        self, incoming: Incoming, model: str, stream: bool, facts_of: FactsOf | None = None
    ) -> UpstreamRequest:
        """The client's body as its own bytes, with its version and beta headers; the
        parsed tree is let go (only its outline stays), so the request holds its size once."""
        assert isinstance(incoming.payload, dict)
        facts = facts_of(model, incoming.payload) if facts_of is not None else NO_FACTS
        request = UpstreamRequest(
            outline(incoming.payload),
            model,
            stream,
            self.surface,
            content=incoming.raw.removeprefix(_BOM),
            headers=forwarded_headers(incoming.scope["headers"]),
            conversation=facts.conversation,
            anthropic_only=facts.anthropic_only,
        )
        incoming.release()
        return request


@final
class MessagesDoor(_AnthropicDoor):
    """Messages in, Messages upstream, the upstream's answer back as it was sent.

    ``owned``: the ownership table that message threads are recorded in
    (``anthropic_threads``); without it a ``thread`` is relayed unscoped (tests only).
    ``known_file``: whether a tenant may name a file id (its own file); without it file
    sources are not checked (tests only).
    """

    def __init__(
        self, owned: OwnedObjects | None = None, known_file: KnownFile | None = None
    ) -> None:
        super().__init__(SURFACE, generates=True)
        self._threads = ThreadOwnership(owned) if owned is not None else None
        self._known_file = known_file

    def error_reply(self, exc: ProxyError) -> JSONReply:
        reply = super().error_reply(exc)
        assert isinstance(reply.body, bytes)
        reply.body = with_details(reply.body, exc)
        return reply

    async def handle(self, pipeline: Pipeline, incoming: Incoming) -> JSONReply | StreamReply:
        # Nothing to translate: the checks are a few lookups whatever the body's size.
        headers = incoming.scope["headers"]
        try:
            model, stream = check_messages(incoming.payload)
            thread = None if self._threads is None else thread_request(incoming.payload, headers)
            await self._check_files(incoming)
        except ProxyError as exc:
            raise self.refused(pipeline, exc, incoming) from None
        facts_of = pipeline.route_facts(incoming.tenant, headers)
        if thread is not None and self._threads is not None:
            owner = incoming.tenant.name if incoming.tenant is not None else ""
            try:
                pinned = await self._threads.holder(thread, owner)
            except ProxyError as exc:  # not the sender's thread: never reaches the upstream
                raise self.refused(pipeline, exc, incoming) from None
            request = self.upstream_request(incoming, model, stream, facts_of)
            request = self._threads.attach(request, owner, pinned)
        else:
            request = self.upstream_request(incoming, model, stream, facts_of)
        try:
            return await pipeline.handle(
                request, _CODEC, incoming.arrived, incoming.tenant, incoming.trace
            )
        except ProxyError as exc:
            if request.pinned is not None and exc.code == PINNED_UPSTREAM_GONE:
                # The upstream that held the thread is gone from the configuration: the
                # thread is lost, which the SDKs recover from by replaying it.
                raise thread_not_found() from None
            raise

    async def _check_files(self, incoming: Incoming) -> None:
        """A ``file`` source must name a file of the caller's own (``edge.anthropic_files``):
        another tenant's file, or an unknown id, is Anthropic's 404 for an unknown file,
        before the upstream (where every tenant's files sit under one key) sees it."""
        if self._known_file is None:
            return
        for file_id in dict.fromkeys(file_ids(incoming.payload)):
            if not await self._known_file(file_id, incoming.tenant):
                raise file_not_found(file_id)


@final
class CountTokensDoor(_AnthropicDoor):
    """``count_tokens`` forwarded upstream; its answer (or error) relayed as it is."""

    def __init__(self) -> None:
        super().__init__(COUNT_TOKENS_SURFACE, generates=False)

    async def handle(self, pipeline: Pipeline, incoming: Incoming) -> JSONReply:
        try:
            model = check_count_tokens(incoming.payload)
        except ProxyError as exc:
            raise self.refused(pipeline, exc, incoming) from None
        request = self.upstream_request(incoming, model, False)
        reply, timing = await pipeline.count_tokens(request, incoming.arrived)
        headers = relayed_headers(reply.headers)
        headers["Server-Timing"] = timing.server_timing_header()
        return JSONReply(reply.raw, headers)
