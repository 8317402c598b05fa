"""The OpenAI Responses door: ``POST /v1/responses``, with stored conversations.

Decodes a Responses body into an upstream request (``translation.openai_responses``) and
hands it to the pipeline with the codec that answers in Responses' terms, exactly as the
Chat door does; what is new is state. A ``previous_response_id`` is resolved from the
store before anything else (an unknown one is a 400 and no upstream call), and the
earlier turns travel upstream ahead of the new input. With ``store`` (the default) the
finished response is written before the client can see it finish: a JSON reply after the
store returns, a stream's terminal event held until then (``_StoringStream``), so a client
that retrieves or continues a response the moment it has it always finds it.

A ``background: true`` request is validated the same way, then handed to the background
runner (``edge.background``), which stores it ``queued`` and runs it detached from the
connection; the create call is answered at once.

A response belongs to the client key that created it (``owner_of``; with no
``PROXY_API_KEYS`` every caller is one owner), and another key's lookups see nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, final

import trio

from ..errors import ProxyError, invalid_request
from ..pipeline.contract import JSONReply, StreamReply
from ..pipeline.core import Pipeline
from ..settings import Settings
from ..store import ResponseStore, StoredResponse, owner_of
from ..store.responses import ChainBroken, StoreUnavailable
from ..tenants import Tenant
from ..translation.openai_chat import TranslationOptions
from ..translation.openai_responses import (
    ResponsesCodec,
    ResponsesRequest,
    client_view,
    item_references,
    new_response_id,
    translate_request,
)
from ..upstream.request import UpstreamRequest
from ..upstreams.facts import FactsOf
from .auth import client_key
from .background import BackgroundJob, BackgroundRunner
from .background_events import EventLog
from .hosts import FOREIGN_HOST, host_not_allowed
from .http import Incoming
from .translated import upstream_request_of

__all__ = ["RESPONSES_PATH", "SURFACE", "ResponsesDoor", "reading_the_store", "request_owner"]

log = logging.getLogger("trio_batcher")

RESPONSES_PATH: Final = "/v1/responses"
SURFACE: Final = "openai.responses"
_DAY_S: Final = 86_400.0


def request_owner(headers: Mapping[str, str] | Sequence[tuple[bytes, bytes]], keyed: bool) -> str:
    """Who owns what this request stores or reads: its key's hash, when keys are required."""
    if not keyed:
        return ""
    if isinstance(headers, Mapping):
        key = client_key(
            headers.get("authorization"), headers.get("api-key"), headers.get("x-api-key")
        )
    else:
        found: dict[bytes, str] = {}
        for name, value in headers:
            found.setdefault(name, value.decode("latin-1"))
        key = client_key(
            found.get(b"authorization"), found.get(b"api-key"), found.get(b"x-api-key")
        )
    return owner_of(key)


@contextlib.contextmanager
def reading_the_store() -> Iterator[None]:
    """A store that fails is a 503 for the client (logged here, with the cause but never
    the stored data), not a 500; the client's own request was fine."""
    try:
        yield
    except StoreUnavailable as exc:
        log.warning("the response store is unavailable: %s", exc)
        raise ProxyError(
            503,
            "The gateway's response store is unavailable; try again later.",
            type="server_error",
            code="store_unavailable",
        ) from None


@final
class ResponsesDoor:
    """Responses in, Anthropic Messages upstream, the finished response kept when asked."""

    surface: Final = SURFACE
    generates: Final = True
    relays_body: Final = False

    def __init__(
        self,
        settings: Settings,
        store: ResponseStore,
        keyed: Callable[[], bool] | None = None,
        background: BackgroundRunner | None = None,
    ) -> None:
        self._options = TranslationOptions(
            default_model=settings.default_model,
            default_max_tokens=settings.default_max_tokens,
            anthropic_version=settings.anthropic_version,
        )
        # With a flex window, service_tier "flex" is honoured (pipeline.flex), not ignored.
        self._flex_options = replace(self._options, flex=True)
        self._store = store
        # Whether client keys are required (then each key owns what it stores).
        self._keyed = keyed or (lambda: bool(settings.proxy_api_keys))
        self._retention_s = settings.responses_retention_days * _DAY_S
        self._large_bodies = trio.CapacityLimiter(1)
        self._background = background

    async def handle(self, pipeline: Pipeline, incoming: Incoming) -> JSONReply | StreamReply:
        payload = incoming.payload
        owner = request_owner(incoming.scope["headers"], self._keyed())
        try:
            _check_host(payload, incoming.scope.get(FOREIGN_HOST))
            history = await self._history(payload, owner)
            references = await self._references(payload, history, owner)
            facts_of = pipeline.route_facts(incoming.tenant, incoming.scope["headers"])
            options = self._flex_options if pipeline.flex_ready else self._options
            if incoming.large:
                tr, request = await trio.to_thread.run_sync(
                    _translate,
                    payload,
                    options,
                    history,
                    references,
                    True,
                    facts_of,
                    limiter=self._large_bodies,
                )
            else:
                tr, request = _translate(payload, options, history, references, False, facts_of)
        except ProxyError as exc:
            stream = isinstance(payload, dict) and payload.get("stream") is True
            timing = pipeline.record_refused(
                exc.status, incoming.arrived, stream=stream, surface=SURFACE, tenant=incoming.tenant
            )
            exc.headers["Server-Timing"] = timing.server_timing_header()
            raise
        del payload, history, references
        incoming.release()
        codec = ResponsesCodec(tr, response_id=new_response_id(), created_at=int(time.time()))
        if tr.background:
            return await self._accept_background(pipeline, tr, codec, request, owner, incoming)
        reply = await pipeline.handle(
            request, codec, incoming.arrived, incoming.tenant, incoming.trace
        )
        if not tr.store:
            return reply
        keep = _Keeper(self._store, tr, codec, owner, self._retention_s)
        if isinstance(reply, JSONReply):
            await keep()
            return reply
        reply.body = _StoringStream(reply.body, keep)
        return reply

    async def _accept_background(
        self,
        pipeline: Pipeline,
        tr: ResponsesRequest,
        codec: ResponsesCodec,
        request: UpstreamRequest,
        owner: str,
        incoming: Incoming,
    ) -> JSONReply | StreamReply:
        """Store the response as queued, start it, and answer at once: the queued object,
        or (``stream``) a stream of its events that a disconnect does not stop."""
        runner = self._background
        tenant: Tenant | None = incoming.tenant
        try:
            if runner is None:
                raise ProxyError(503, "The proxy is starting up.", code="starting")
            pipeline.check_budget(tenant)
            events = EventLog(runner.stream_buffer_bytes) if tr.stream else None
            if events is not None:
                events.append(b"".join(codec.stream().queued()))
            job = BackgroundJob(
                response_id=codec.response_id,
                owner=owner,
                tr=tr,
                codec=codec,
                request=request,
                tenant=tenant,
                created_at=codec.created_at,
                expires_at=time.time() + self._retention_s,
                events=events,
            )
            with reading_the_store():
                queued = await runner.accept(job)
        except ProxyError as exc:
            timing = pipeline.record_refused(
                exc.status, incoming.arrived, stream=tr.stream, surface=SURFACE, tenant=tenant
            )
            exc.headers["Server-Timing"] = timing.server_timing_header()
            raise
        headers = codec.headers({})
        if events is None:
            return JSONReply(client_view(queued, tr.include), headers)
        return StreamReply(events.follow(None), headers, lambda: None)

    def error_reply(self, exc: ProxyError) -> JSONReply:
        return JSONReply(exc.body(), exc.headers, exc.status)

    async def _history(self, payload: object, owner: str) -> list[dict[str, Any]]:
        """The earlier turns named by ``previous_response_id``, oldest first."""
        previous = payload.get("previous_response_id") if isinstance(payload, dict) else None
        if previous is None:
            return []
        if not isinstance(previous, str) or not previous:
            raise invalid_request(
                "previous_response_id must be a response id (a string).",
                param="previous_response_id",
            )
        try:
            with reading_the_store():
                chain = await self._store.chain(previous, owner, time.time())
        except ChainBroken as exc:
            raise _previous_not_found(
                previous,
                f"An earlier turn of this conversation ({exc.missing_id!r}) was deleted or "
                "has expired, so its history cannot be rebuilt.",
            ) from None
        if chain is None:
            raise _previous_not_found(previous)
        history: list[dict[str, Any]] = []
        for record in chain:
            history.extend(record.items())
        return history

    async def _references(
        self, payload: object, history: list[dict[str, Any]], owner: str
    ) -> dict[str, dict[str, Any]]:
        """The stored items that ``item_reference`` items name outside the history."""
        known = {item.get("id") for item in history}
        wanted = [ref for ref in item_references(payload) if ref not in known]
        if not wanted:
            return {}
        with reading_the_store():
            return await self._store.find_items(wanted, owner, time.time())


def _check_host(payload: object, foreign_host: str | None) -> None:
    """403 when a keyless gateway got a request that reads stored responses under a name
    it does not serve them to (``edge.hosts``); a stateless request passes."""
    if foreign_host is None or not isinstance(payload, dict):
        return
    if payload.get("previous_response_id") is not None or item_references(payload):
        raise host_not_allowed(foreign_host, "stored responses")


def _previous_not_found(response_id: str, detail: str = "") -> ProxyError:
    message = f"Previous response with id '{response_id}' not found."
    return invalid_request(
        f"{message} {detail}".strip(),
        param="previous_response_id",
        code="previous_response_not_found",
    )


@final
class _Keeper:
    """Writes one finished response to the store, once; a store failure is logged (without
    the stored data) and the client still gets its answer."""

    def __init__(
        self,
        store: ResponseStore,
        tr: ResponsesRequest,
        codec: ResponsesCodec,
        owner: str,
        retention_s: float,
    ) -> None:
        self._store = store
        self._tr = tr
        self._codec = codec
        self._owner = owner
        self._retention_s = retention_s
        self.done = False

    @property
    def ready(self) -> bool:
        return not self.done and self._codec.final is not None

    async def __call__(self) -> None:
        final = self._codec.final
        if self.done or final is None:
            return
        self.done = True
        now = time.time()
        record = StoredResponse(
            id=str(final["id"]),
            owner=self._owner,
            created_at=now,
            expires_at=now + self._retention_s,
            previous_id=self._tr.previous_response_id,
            response=final,
            input_items=self._tr.input_items,
        )
        try:
            await self._store.put(record)
        except StoreUnavailable as exc:  # disk full, read-only directory...: answer anyway
            log.warning("could not store response %s: %s", record.id, exc)


@final
class _StoringStream:
    """A stream's body that stores the response before passing on its terminal event."""

    def __init__(self, body: AsyncIterator[bytes], keep: _Keeper) -> None:
        self._body = body
        self._keep = keep

    def __aiter__(self) -> _StoringStream:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._body.__anext__()
        if self._keep.ready:
            await self._keep()
        return chunk

    async def aclose(self) -> None:
        aclose = getattr(self._body, "aclose", None)
        if aclose is not None:
            await aclose()


def _translate(
    payload: object,
    options: TranslationOptions,
    history: list[dict[str, Any]],
    references: dict[str, dict[str, Any]],
    large: bool,
    facts_of: FactsOf | None = None,
) -> tuple[ResponsesRequest, UpstreamRequest]:
    """The translation, and the upstream request made of it; a large body is encoded here,
    once, and its translated tree dropped (as the Chat door does, ``openai_chat._translate``)."""
    tr = translate_request(payload, options, history, references)
    body, request = upstream_request_of(
        tr.body,
        tr.upstream_model,
        tr.stream,
        SURFACE,
        large=large,
        facts_of=facts_of,
        flex=tr.flex,
    )
    return (replace(tr, body=body) if large else tr), request
