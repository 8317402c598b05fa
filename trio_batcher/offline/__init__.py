"""The offline path: OpenAI batches carried out as Anthropic Message Batches.

``BatchPoller`` is the task (in the app's nursery, one a process) that validates, sends,
follows and delivers the batches, several at once, each claimed by one process at a time;
the routes in ``edge.openai_batches`` only create records, read them and ask for cancels.
"""

from __future__ import annotations

from ._poller import BATCH_PRICE_FACTOR as BATCH_PRICE_FACTOR
from ._poller import MAX_REPORTED_ERRORS as MAX_REPORTED_ERRORS
from ._poller import MISSING_ROUNDS as MISSING_ROUNDS
from ._poller import SURFACE as SURFACE
from ._poller import BatchPoller as BatchPoller
from ._poller import UsageSink as UsageSink
from ._purge import purge_batches_periodically as purge_batches_periodically

__all__ = [
    "BATCH_PRICE_FACTOR",
    "MAX_REPORTED_ERRORS",
    "MISSING_ROUNDS",
    "SURFACE",
    "BatchPoller",
    "UsageSink",
    "purge_batches_periodically",
]
