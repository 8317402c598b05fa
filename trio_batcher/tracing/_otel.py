"""Tracing on: the seam's classes backed by the OpenTelemetry SDK (imported only here).

Theory of operation
-------------------
``OtelTracing`` owns a ``TracerProvider`` of its own (the SDK's global one is left alone: a
process may run several apps, as the tests do) built from the standard variables: the resource
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``; ``service.name`` is ``trio-batcher``
unless they say otherwise), the sampler (``OTEL_TRACES_SAMPLER``), span limits, and one
``BatchSpanProcessor`` (``OTEL_BSP_*``) in front of the OTLP/HTTP exporter
(``OTEL_EXPORTER_OTLP_*``).

Export never touches the event loop: ending a span only appends it to the processor's bounded
queue (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048 by default); the SDK's own daemon thread encodes and
posts batches. When the queue is full the span is dropped: the SDK says so with a log record
per span, which is counted here (``spans_dropped`` in ``/metrics``) and let through once a
minute, so an overloaded collector shows as a number rather than a flood of warnings.

Context is passed explicitly, never through the SDK's current-context (a contextvar): a
request's upstream attempt runs in a dispatcher or window task spawned long before the request
arrived, so the request's ``RequestTrace`` travels with its ``UpstreamRequest`` and every span
names its parent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import trio
from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context

from . import _content
from ._seam import AttemptTrace, Message, RequestTrace, Send, Tracing, Waiting

__all__ = ["OtelTracing"]

_SERVICE: Final = "trio-batcher"
_PROVIDERS: Final = {"anthropic": "anthropic", "bedrock": "aws.bedrock", "vertex": "gcp.vertex_ai"}
# The incoming headers the propagators may read; nothing else of the client's is looked at.
_CONTEXT_HEADERS: Final = frozenset({b"traceparent", b"tracestate", b"baggage"})
_SHUTDOWN_S: Final = 3.0
# A queueing wait shorter than this is an attribute of the SERVER span, not a span.
MIN_WAIT_SPAN_NS: Final = 1_000_000
_DROP_LOG_EVERY_S: Final = 60.0


@final
class _Counts:
    """What ``/metrics`` shows; the export counts are written by the SDK's thread (plain
    integer updates, which the GIL keeps whole)."""

    def __init__(self) -> None:
        self.started = 0
        self.exported = 0
        self.export_failures = 0
        self.failed_spans = 0


@final
class _DropCounter(logging.Filter):
    """Counts the SDK's "Queue full, dropping" records (one per dropped span), letting
    one through per minute."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0
        self._logged_at = -_DROP_LOG_EVERY_S

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Queue full, dropping"):
            return True
        self.dropped += 1
        now = time.monotonic()
        if now - self._logged_at < _DROP_LOG_EVERY_S:
            return False
        self._logged_at = now
        return True


_DROPS: Final = _DropCounter()
_SDK_LOGGER: Final = logging.getLogger("opentelemetry.sdk._shared_internal")
if _DROPS not in _SDK_LOGGER.filters:
    _SDK_LOGGER.addFilter(_DROPS)


@final
class _CountingExporter(SpanExporter):
    """The OTLP exporter, counting what it sent and what it failed to send."""

    def __init__(self, inner: SpanExporter, counts: _Counts) -> None:
        self._inner = inner
        self._counts = counts

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self._counts.exported += len(spans)
        else:
            self._counts.export_failures += 1
            self._counts.failed_spans += len(spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _resource() -> Resource:
    from .. import __version__

    resource = Resource.create({"service.version": __version__})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": _SERVICE}))
    return resource


def _header(scope: Mapping[str, Any], wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


@final
class _Waiting(Waiting):
    __slots__ = ("_attributes", "_name", "_start", "_trace")

    def __init__(self, trace: _RequestTrace, name: str, attributes: dict[str, Any]) -> None:
        self._trace: _RequestTrace | None = trace
        self._name = name
        self._attributes = attributes
        self._start = time.time_ns()

    def done(self) -> None:
        # Made once the wait is over, with the wait's own start: nothing is held open while
        # a request queues, and a wait cut short by a cancel still shows. A wait too short
        # to matter is only an attribute of the SERVER span: a span costs more CPU than the
        # whole of most requests' gate and dispatch (docs/benchmarks.md, traces on vs off).
        trace, self._trace = self._trace, None
        if trace is None:
            return
        now = time.time_ns()
        waited = now - self._start
        trace.waits[f"trio_batcher.{self._name.replace(' ', '_')}_s"] = waited / 1e9
        if waited >= MIN_WAIT_SPAN_NS:
            span = trace.child(self._name, SpanKind.INTERNAL, self._attributes, self._start)
            span.end(now)


@final
class _Attempt(AttemptTrace):
    __slots__ = ("_capture", "_span", "_started", "_trace")

    def __init__(self, trace: _RequestTrace, span: Span, capture: bool) -> None:
        self._trace = trace
        self._span = span
        self._capture = capture
        self._started = time.monotonic()

    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=set_span_in_context(self._span))
        return tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in carrier.items())

    def replied(self, message: Mapping[str, Any]) -> None:
        attributes = _response(message)
        _finish(attributes, message.get("stop_reason"))
        if self._capture:
            attributes["gen_ai.output.messages"] = _content.output_messages(message)
        self._span.set_attributes(attributes)
        self._span.end()

    def opened(self, message: Mapping[str, Any] | None) -> None:
        attributes = {} if message is None else _response(message)
        attributes["gen_ai.response.time_to_first_chunk"] = time.monotonic() - self._started
        self._span.set_attributes(attributes)
        self._span.add_event("gen_ai.first_chunk")
        if self._trace.ended:  # the client left while the stream was opening
            self.stream_ended(499, {}, None)
        else:
            self._trace.streaming = self

    def stream_ended(self, status: int, usage: Mapping[str, Any], stop_reason: str | None) -> None:
        attributes: dict[str, Any] = {}
        _usage(attributes, usage)
        _finish(attributes, stop_reason)
        self._span.set_attributes(attributes)
        if status != 200:
            _fail(self._span, str(status))
        self._span.end()

    def failed(self, exc: BaseException) -> None:
        _fail(self._span, _error_type(exc))
        self._span.end()


def _response(message: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if isinstance(message.get("id"), str):
        attributes["gen_ai.response.id"] = message["id"]
    if isinstance(message.get("model"), str):
        attributes["gen_ai.response.model"] = message["model"]
    _usage(attributes, message.get("usage"))
    return attributes


def _finish(attributes: dict[str, Any], stop_reason: object) -> None:
    if isinstance(stop_reason, str):
        attributes["gen_ai.response.finish_reasons"] = [stop_reason]


def _error_type(exc: BaseException) -> str:
    if isinstance(exc, trio.Cancelled):
        return "cancelled"
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        return code
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return str(status)
    return type(exc).__qualname__


def _fail(span: Span, error_type: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR))


def _usage(attributes: dict[str, Any], usage: object) -> None:
    if not isinstance(usage, Mapping):
        return
    for field, name in (
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
        ("cache_read_input_tokens", "gen_ai.usage.cache_read.input_tokens"),
        ("cache_creation_input_tokens", "gen_ai.usage.cache_creation.input_tokens"),
    ):
        value = usage.get(field)
        if isinstance(value, int) and not isinstance(value, bool):
            attributes[name] = value


@final
class _RequestTrace(RequestTrace):
    __slots__ = ("_context", "_owner", "_span", "_status", "_tenant", "ended", "streaming", "waits")

    def __init__(self, owner: OtelTracing, span: Span) -> None:
        self._owner = owner
        self._span = span
        self._context = set_span_in_context(span)
        self._status: int | None = None
        self._tenant: str | None = None
        self.ended = False
        self.waits: dict[str, float] = {}  # set on the span at its end, with the status
        self.streaming: _Attempt | None = None

    @property
    def recording(self) -> bool:
        return True

    @property
    def trace_id(self) -> str | None:
        return format(self._span.get_span_context().trace_id, "032x")

    @property
    def span_id(self) -> str | None:
        return format(self._span.get_span_context().span_id, "016x")

    def watch(self, send: Send) -> Send:
        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                self._status = int(message["status"])
            await send(message)

        return watched

    def tenant(self, name: str) -> None:
        self._tenant = name

    def child(
        self, name: str, kind: SpanKind, attributes: Mapping[str, Any], start: int | None = None
    ) -> Span:
        return self._owner.start(name, self._context, kind, attributes, start)

    def waiting(self, name: str, **attributes: str) -> Waiting:
        return _Waiting(self, name, {f"trio_batcher.{k}": v for k, v in attributes.items()})

    def attempt(
        self,
        *,
        model: str,
        body: Mapping[str, Any],
        content: bytes | None,
        upstream: str,
        kind: str,
        server: tuple[str, int] | None,
        number: int,
        cause: str,
        after: str | None,
    ) -> AttemptTrace:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _PROVIDERS.get(kind, kind),
            "gen_ai.request.model": model,
            "trio_batcher.upstream": upstream,
            "trio_batcher.attempt": number,
            "trio_batcher.attempt.cause": cause,
        }
        if after is not None:
            attributes["trio_batcher.attempt.after"] = after
        if server is not None:
            attributes["server.address"], attributes["server.port"] = server
        for field, name in (
            ("max_tokens", "gen_ai.request.max_tokens"),
            ("temperature", "gen_ai.request.temperature"),
            ("top_p", "gen_ai.request.top_p"),
            ("top_k", "gen_ai.request.top_k"),
        ):
            value = body.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[name] = value
        if self._owner.capture:
            _capture_input(attributes, body, content)
        span = self.child(f"chat {model}", SpanKind.CLIENT, attributes)
        return _Attempt(self, span, self._owner.capture)

    def stream_ended(self, status: int, usage: Mapping[str, Any], stop_reason: str | None) -> None:
        attempt, self.streaming = self.streaming, None
        if attempt is not None:
            attempt.stream_ended(status, usage, stop_reason)

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.stream_ended(499, {}, None)  # a stream still open: its client is gone
        span = self._span
        attributes: dict[str, Any] = self.waits
        if self._tenant is not None:
            attributes["trio_batcher.tenant"] = self._tenant
        if self._status is not None:
            attributes["http.response.status_code"] = self._status
        span.set_attributes(attributes)
        if self._status is None:
            _fail(span, "client_closed")
        elif self._status >= 500:
            _fail(span, str(self._status))
        span.end()


def _capture_input(
    attributes: dict[str, Any], body: Mapping[str, Any], content: bytes | None
) -> None:
    """The prompt, from the body (a relayed body travels as bytes, its outline parsed)."""
    import json

    if "messages" not in body and content is not None:
        try:
            parsed = json.loads(content)
        except ValueError:
            return
        if isinstance(parsed, Mapping):
            body = parsed
    if (system := _content.system_instructions(body)) is not None:
        attributes["gen_ai.system_instructions"] = system
    if (messages := _content.input_messages(body)) is not None:
        attributes["gen_ai.input.messages"] = messages


@final
class OtelTracing(Tracing):
    """Traces on (module doc); ``capture``: record prompts and completions too."""

    __slots__ = ("_drops_at_start", "_processor", "_provider", "capture", "counts", "tracer")

    def __init__(self, *, capture: bool) -> None:
        from .. import __version__

        self.capture = capture
        self.counts = _Counts()
        self._drops_at_start = _DROPS.dropped
        self._provider = TracerProvider(resource=_resource())
        self._processor = BatchSpanProcessor(_CountingExporter(OTLPSpanExporter(), self.counts))
        self._provider.add_span_processor(self._processor)
        self.tracer = self._provider.get_tracer("trio_batcher", __version__)

    @property
    def enabled(self) -> bool:
        return True

    def request(self, scope: Mapping[str, Any], door: str) -> RequestTrace:
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in _CONTEXT_HEADERS
        }
        parent: Context | None = propagate.extract(carrier) if carrier else None
        method = scope["method"]
        path = scope["path"]
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "http.route": path,
            "url.path": path,
            "url.scheme": scope.get("scheme", "http"),
            "trio_batcher.door": door,
        }
        server = scope.get("server")
        if server:
            attributes["server.address"], attributes["server.port"] = server[0], server[1]
        client = scope.get("client")
        if client:
            attributes["client.address"] = client[0]
        agent = _header(scope, b"user-agent")
        if agent is not None:
            attributes["user_agent.original"] = agent
        span = self.start(f"{method} {path}", parent, SpanKind.SERVER, attributes)
        return _RequestTrace(self, span)

    def start(
        self,
        name: str,
        parent: Context | None,
        kind: SpanKind,
        attributes: Mapping[str, Any],
        start: int | None = None,
    ) -> Span:
        """A span with ``attributes``, set after the sampler's decision: handed to
        ``start_span`` they would be validated twice (once for the sampler, which ignores
        them here, once for the span), and validating attributes is most of a span's cost."""
        self.counts.started += 1
        span = self.tracer.start_span(name, context=parent, kind=kind, start_time=start)
        if span.is_recording():
            span.set_attributes(attributes)
        return span

    def statistics(self) -> dict[str, Any]:
        counts = self.counts
        return {
            "enabled": True,
            "capture_content": self.capture,
            "spans_started": counts.started,
            "spans_exported": counts.exported,
            "spans_dropped": _DROPS.dropped - self._drops_at_start,
            "export_failures": counts.export_failures,
            "spans_failed_to_export": counts.failed_spans,
        }

    async def aclose(self) -> None:
        # The SDK's shutdown joins its thread after a last export: in a thread of ours, so
        # the loop keeps running, and abandoned if the collector does not answer in time.
        with trio.move_on_after(_SHUTDOWN_S):
            await trio.to_thread.run_sync(self._provider.shutdown, abandon_on_cancel=True)
