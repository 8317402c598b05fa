"""OpenAI Batch API ⇄ Anthropic Message Batches, as pure functions (no I/O, no clock).

- ``validate_line`` / ``LineChecker``: an input file's lines → translated requests (the
  realtime translation) or the ``errors.data`` entries that fail the batch;
- ``anthropic_custom_id``: a client ``custom_id`` → an id Anthropic accepts;
- ``split_batches``: which requests go in which Message Batch, under Anthropic's limits;
- ``output_line``: a results line → an output-file or error-file line;
- ``openai_status`` / ``request_counts`` / ``combined``: the batch object's state.

The batch service (I/O: files, store, poller) drives these; nothing here knows of it.
"""

from __future__ import annotations

from ._ids import ANTHROPIC_CUSTOM_ID as ANTHROPIC_CUSTOM_ID
from ._ids import anthropic_custom_id as anthropic_custom_id
from ._lines import CHAT_ENDPOINT as CHAT_ENDPOINT
from ._lines import ENDPOINTS as ENDPOINTS
from ._lines import MAX_CUSTOM_ID_CHARS as MAX_CUSTOM_ID_CHARS
from ._lines import MAX_FILE_BYTES as MAX_FILE_BYTES
from ._lines import MAX_FILE_LINES as MAX_FILE_LINES
from ._lines import RESPONSES_ENDPOINT as RESPONSES_ENDPOINT
from ._lines import BatchLine as BatchLine
from ._lines import LineChecker as LineChecker
from ._lines import LineError as LineError
from ._lines import duplicate_id as duplicate_id
from ._lines import validate_line as validate_line
from ._output import BATCH_CANCELLED as BATCH_CANCELLED
from ._output import BATCH_EXPIRED as BATCH_EXPIRED
from ._output import IdFactory as IdFactory
from ._output import OutputKind as OutputKind
from ._output import new_id as new_id
from ._output import output_line as output_line
from ._split import BODY_PREFIX as BODY_PREFIX
from ._split import BODY_SUFFIX as BODY_SUFFIX
from ._split import MAX_BATCH_BYTES as MAX_BATCH_BYTES
from ._split import MAX_BATCH_REQUESTS as MAX_BATCH_REQUESTS
from ._split import PlannedBatch as PlannedBatch
from ._split import RequestTooLarge as RequestTooLarge
from ._split import batch_body as batch_body
from ._split import request_entry as request_entry
from ._split import split_batches as split_batches
from ._status import OpenAIBatchStatus as OpenAIBatchStatus
from ._status import combined as combined
from ._status import openai_status as openai_status
from ._status import request_counts as request_counts
from ._status import unix_seconds as unix_seconds

__all__ = [
    "ANTHROPIC_CUSTOM_ID",
    "BATCH_CANCELLED",
    "BATCH_EXPIRED",
    "BODY_PREFIX",
    "BODY_SUFFIX",
    "CHAT_ENDPOINT",
    "ENDPOINTS",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_REQUESTS",
    "MAX_CUSTOM_ID_CHARS",
    "MAX_FILE_BYTES",
    "MAX_FILE_LINES",
    "RESPONSES_ENDPOINT",
    "BatchLine",
    "IdFactory",
    "LineChecker",
    "LineError",
    "OpenAIBatchStatus",
    "OutputKind",
    "PlannedBatch",
    "RequestTooLarge",
    "anthropic_custom_id",
    "batch_body",
    "combined",
    "duplicate_id",
    "new_id",
    "openai_status",
    "output_line",
    "request_counts",
    "request_entry",
    "split_batches",
    "unix_seconds",
    "validate_line",
]
