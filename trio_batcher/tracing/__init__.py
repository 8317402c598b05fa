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

import os
from collections.abc import Mapping

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
    "capture_content",
    "check_tracing",
    "start_tracing",
    "tracing_requested",
]


def start_tracing(environ: Mapping[str, str] | None = None) -> Tracing:
    """The process's tracer for ``environ`` (``os.environ``): the no-op one when traces are
    off; raises ``TracingConfigError`` when they are asked for but cannot be sent."""
    environ = os.environ if environ is None else environ
    if not check_tracing(environ):
        return NOOP_TRACING
    from ._otel import OtelTracing

    return OtelTracing(capture=capture_content(environ))
