"""OpenTelemetry traces of the gateway's requests, with the GenAI conventions (optional).

One seam: the edge asks the process's ``Tracing`` for a ``RequestTrace`` per request (the
SERVER span), which travels with the request's ``UpstreamRequest``; the pipeline times its
waits on it (gate, dispatch) and the fleet records each upstream attempt as a CLIENT span
(``attempt``) whose ``traceparent`` goes upstream. Off (no ``OTEL_EXPORTER_OTLP_*ENDPOINT``,
the default), every one of those objects is a shared no-op whose methods return at once, and
``opentelemetry`` is never imported: the ``otel`` extra is needed only to turn traces on.

``start_tracing`` decides (``check_tracing``) and builds the SDK-backed one
(``_otel.OtelTracing``) only when traces are on; docs/observability.md lists every span and
attribute.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ._config import (
    CAPTURE_CONTENT,
    ENDPOINT_VARIABLES,
    MissingTracingExtraError,
    TracingConfigError,
    capture_content,
    check_tracing,
    tracing_requested,
)
from ._seam import (
    NOOP_ATTEMPT,
    NOOP_TRACE,
    NOOP_TRACING,
    NOOP_WAITING,
    AttemptTrace,
    RequestTrace,
    Tracing,
    Waiting,
)

__all__ = [
    "CAPTURE_CONTENT",
    "ENDPOINT_VARIABLES",
    "NOOP_ATTEMPT",
    "NOOP_TRACE",
    "NOOP_TRACING",
    "NOOP_WAITING",
    "AttemptTrace",
    "MissingTracingExtraError",
    "RequestTrace",
    "Tracing",
    "TracingConfigError",
    "Waiting",
    "active_trace_ids",
    "capture_content",
    "check_tracing",
    "serving",
    "start_tracing",
    "tracing_requested",
]

# The request a task serves, for what it logs (``logs.set_trace_ids_provider``): trio tasks
# take a copy of their parent's context, so a request's own task and those it starts see it.
_ACTIVE: contextvars.ContextVar[RequestTrace] = contextvars.ContextVar(
    "trio_batcher_request_trace", default=NOOP_TRACE
)


@contextmanager
def serving(trace: RequestTrace) -> Iterator[None]:
    """While the block runs, ``trace`` is the request this task serves (for its logs)."""
    token = _ACTIVE.set(trace)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_trace_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the request this task serves, when it is traced: what a
    JSON log line carries, so a line and its trace are found from each other."""
    trace = _ACTIVE.get()
    trace_id, span_id = trace.trace_id, trace.span_id
    if trace_id is None or span_id is None:
        return None
    return trace_id, span_id


def start_tracing(environ: Mapping[str, str] | None = None) -> Tracing:
    """The process's tracer for ``environ`` (``os.environ``): the no-op one when traces are
    off; raises ``TracingConfigError`` when they are asked for but cannot be sent."""
    environ = os.environ if environ is None else environ
    if not check_tracing(environ):
        return NOOP_TRACING
    from ._otel import OtelTracing

    return OtelTracing(capture=capture_content(environ))
