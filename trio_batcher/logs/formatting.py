"""How a log line is written: the familiar text line, or one JSON object a line.

The request and refusal lines (``decisions``, ``refusals``) carry their facts twice, at
no extra cost: as ``key=value`` pairs in the message, rendered only when a handler
formats the record (``Fields.__str__``), and as the record's ``fields`` mapping, which
the JSON formatter writes as fields of their own, so a log pipeline can filter on
``status`` or ``tenant`` without parsing the message. Every other line (the gateway's,
hypercorn's access and error logs, the libraries') goes through the same root handler,
so ``LOG_FORMAT=json`` makes every line of the process JSON.

Trace ids: the JSON formatter asks ``current_trace_ids()`` for the active trace's ids.
It returns ``None`` unless a provider was registered with ``set_trace_ids_provider``:
the tracing module registers one when tracing is on, so this module imports nothing of
OpenTelemetry.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, final

__all__ = [
    "Fields",
    "JsonFormatter",
    "TraceIds",
    "configure_logging",
    "current_trace_ids",
    "set_trace_ids_provider",
]

TraceIds = tuple[str, str]
"""``(trace_id, span_id)`` as lower-case hex (32 and 16 digits), as W3C traceparent has them."""

_NO_TRACE: Final[Callable[[], TraceIds | None]] = lambda: None  # noqa: E731
_trace_ids: Callable[[], TraceIds | None] = _NO_TRACE

# A value written bare in a ``key=value`` line; anything else is JSON-quoted, so a model
# name or path a client chose cannot break a line or forge one.
_BARE: Final = re.compile(r"[\w.:/@+\-,<>]{1,200}")
_NOISY: Final = ("httpx", "httpx2", "httpcore", "httpcore2")


def set_trace_ids_provider(provider: Callable[[], TraceIds | None] | None) -> None:
    """Register what ``current_trace_ids`` asks (``None``: back to no trace ever).

    The tracing module sets this provider when tracing is on; it must be cheap and never
    raise (it runs for every JSON line)."""
    global _trace_ids
    _trace_ids = provider or _NO_TRACE


def current_trace_ids() -> TraceIds | None:
    """The active trace's ``(trace_id, span_id)``, or None (no tracing, no active span)."""
    try:
        return _trace_ids()
    except Exception:  # a log line must not fail for want of a trace id
        return None


@final
class Fields:
    """A request's or refusal's facts: rendered ``key=value key=value`` only when a handler
    formats the record, and read as they are by ``JsonFormatter``. ``None`` values are
    left out."""

    __slots__ = ("values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = {k: v for k, v in values.items() if v is not None}

    def __str__(self) -> str:
        return " ".join(f"{key}={_text(value)}" for key, value in self.values.items())


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.1f}"
    text = str(value)
    return text if _BARE.fullmatch(text) else json.dumps(text)


@final
class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``timestamp`` (RFC 3339, UTC), ``level``, ``logger``,
    ``message``, the record's ``fields`` (``Fields``) as fields of their own,
    ``trace_id``/``span_id`` when a trace is active, ``exception`` (the traceback as one
    string: the line stays one line), and ``pid`` with ``with_pid``."""

    def __init__(self, *, with_pid: bool = False) -> None:
        super().__init__()
        self._with_pid = with_pid

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self._with_pid:
            line["pid"] = record.process
        fields = getattr(record, "fields", None)
        if isinstance(fields, Fields):
            for key, value in fields.values.items():
                line.setdefault(key, value)
        ids = current_trace_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def text_formatter(*, with_pid: bool = False) -> logging.Formatter:
    """The text line: ``time LEVEL logger[pid]: message``."""
    pid = "[%(process)d]" if with_pid else ""  # several workers share one log
    return logging.Formatter(f"%(asctime)s %(levelname)s %(name)s{pid}: %(message)s")


def configure_logging(level: str, log_format: str = "text", *, with_pid: bool = False) -> None:
    """The process's logging, once, at its entry point: one handler on stderr for every
    logger (hypercorn's access and error logs propagate to it), in ``log_format``
    (``text`` or ``json``); the HTTP clients' chatter only from WARNING."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter(with_pid=with_pid)
        if log_format == "json"
        else text_formatter(with_pid=with_pid)
    )
    logging.basicConfig(level=level.upper(), handlers=[handler])
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
