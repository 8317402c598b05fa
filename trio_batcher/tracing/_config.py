"""Whether tracing is on, read from the standard ``OTEL_*`` variables (no SDK needed).

The decision is made before anything from ``opentelemetry`` is imported, so a gateway whose
environment asks for no traces never loads the SDK (and runs without the ``otel`` extra).
Everything past the decision (endpoint, headers, sampler, batch sizes, resource) is left to the
SDK's own reading of the same variables.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Final, final

__all__ = [
    "CAPTURE_CONTENT",
    "ENDPOINT_VARIABLES",
    "MissingTracingExtraError",
    "TracingConfigError",
    "capture_content",
    "check_tracing",
    "tracing_requested",
]

ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# The GenAI instrumentations' conventional switch for recording prompts and completions.
CAPTURE_CONTENT: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# What the extra must make importable (its distributions pull in the rest).
_MODULES: Final = (
    "opentelemetry.sdk.trace",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)
_PROTOCOLS: Final = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class TracingConfigError(RuntimeError):
    """The ``OTEL_*`` variables ask for traces this gateway cannot send; ``variable`` names
    the one to fix."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
        self.problem = problem


@final
class MissingTracingExtraError(TracingConfigError):
    """Traces are asked for but the SDK is not installed."""

    command: Final = "pip install 'trio-batcher[otel]'"

    def __init__(self, variable: str, missing: str) -> None:
        super().__init__(
            variable,
            f"traces need the OpenTelemetry SDK, which is not installed (cannot import "
            f"{missing}); install it with: {self.command}",
        )


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def tracing_requested(environ: Mapping[str, str]) -> str | None:
    """The variable that turns traces on (an OTLP endpoint), or ``None`` for off: no
    endpoint, ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``."""
    if _true(environ.get("OTEL_SDK_DISABLED")):
        return None
    if (environ.get("OTEL_TRACES_EXPORTER") or "").strip().lower() == "none":
        return None
    return next((name for name in ENDPOINT_VARIABLES if (environ.get(name) or "").strip()), None)


def capture_content(environ: Mapping[str, str]) -> bool:
    """Whether prompts and completions go into spans: only when explicitly ``true``."""
    return _true(environ.get(CAPTURE_CONTENT))


def check_tracing(environ: Mapping[str, str]) -> bool:
    """Whether traces are on; raises ``TracingConfigError`` (a missing extra, an exporter
    or protocol not served) at start rather than on the first request."""
    variable = tracing_requested(environ)
    if variable is None:
        return False
    exporter = (environ.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower()
    if exporter != "otlp":
        raise TracingConfigError(
            "OTEL_TRACES_EXPORTER", f"{exporter!r} is not served; use otlp (or none)"
        )
    for name in _PROTOCOLS:
        protocol = (environ.get(name) or "").strip().lower()
        if protocol and protocol != "http/protobuf":
            raise TracingConfigError(
                name, f"{protocol!r} is not served; the gateway exports OTLP over http/protobuf"
            )
        if protocol:
            break
    for module in _MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            raise MissingTracingExtraError(variable, module) from None
    return True
