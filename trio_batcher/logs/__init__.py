"""The gateway's logs: what a request decided (``decisions``, at DEBUG), the refusals it
made (``refusals``, at INFO, rate-limited), and how a line is written (``formatting``:
text, or one JSON object a line with the trace ids). Never a body, never a key."""

from .decisions import DecisionNotes as DecisionNotes
from .decisions import decision_notes as decision_notes
from .decisions import log_failover as log_failover
from .formatting import JsonFormatter as JsonFormatter
from .formatting import configure_logging as configure_logging
from .formatting import current_trace_ids as current_trace_ids
from .formatting import set_trace_ids_provider as set_trace_ids_provider
from .refusals import RefusalLog as RefusalLog
from .refusals import route_family as route_family

__all__ = [
    "DecisionNotes",
    "JsonFormatter",
    "RefusalLog",
    "configure_logging",
    "current_trace_ids",
    "decision_notes",
    "log_failover",
    "route_family",
    "set_trace_ids_provider",
]
