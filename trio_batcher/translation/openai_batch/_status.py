"""The OpenAI batch status, derived from the Anthropic Message Batch(es) and our own stages.

Anthropic's ``processing_status`` has three values (``in_progress``, ``canceling``,
``ended``); OpenAI's ``status`` has eight, because it also names what happens before the
upstream is involved (validating the file) and after (writing the output files), and how a
batch ended. Those are facts only the gateway has, so the caller passes them. The mapping,
first matching row wins (it never calls a cancelled or expired batch "completed"):

====================  ==================  ================  ==============================
gateway               ``processing_status``  results          OpenAI ``status``
====================  ==================  ================  ==============================
``failed``            any                 --                ``failed``
no batch, not         --                  --                ``validating``; ``cancelling``
``validated``                                               if ``cancel_requested``
no batch, validated   --                  --                ``validating`` (being created);
                                                            ``cancelled`` if
                                                            ``cancel_requested`` (never sent)
--                    ``in_progress``     --                ``in_progress``; ``cancelling``
                                                            if ``cancel_requested``
--                    ``canceling``       --                ``cancelling``
``finalizing``        ``ended``           --                ``finalizing``; ``cancelling``
                                                            if cancelled (below)
done                  ``ended``           cancelled [1]_    ``cancelled``
done                  ``ended``           ``expired`` > 0   ``expired``
done                  ``ended``           otherwise         ``completed`` (even if every
                                                            request errored, as OpenAI)
====================  ==================  ================  ==============================

.. [1] ``cancel_requested``, or the upstream batch has a ``cancel_initiated_at`` (someone
   cancelled it upstream).

``request_counts``: ``total`` is every request, ``completed`` the ``succeeded`` ones,
``failed`` the ``errored`` + ``canceled`` + ``expired`` ones (each is a line of the error
file). Anthropic's counts only move when a batch ends, so during processing ``completed``
and ``failed`` stay 0 -- as reported, not guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Literal

__all__ = ["OpenAIBatchStatus", "combined", "openai_status", "request_counts", "unix_seconds"]

OpenAIBatchStatus = Literal[
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
]
_COUNTS: Final = ("processing", "succeeded", "errored", "canceled", "expired")


def openai_status(
    anthropic_batch: Mapping[str, Any] | None,
    *,
    cancel_requested: bool,
    validated: bool,
    finalizing: bool,
    failed: bool = False,
) -> OpenAIBatchStatus:
    """The OpenAI ``status`` (the table in the module docstring).

    Args:
      anthropic_batch: the Message Batch (``combined`` for several), None before one exists.
      cancel_requested: the client asked to cancel.
      validated: the input file passed validation.
      finalizing: the upstream batch ended and the output files are still being written.
      failed: validation found bad lines, or the upstream refused to create the batch.
    """
    if failed:
        return "failed"
    if anthropic_batch is None:
        if not validated:
            return "cancelling" if cancel_requested else "validating"
        return "cancelled" if cancel_requested else "validating"
    processing = anthropic_batch.get("processing_status")
    cancelled = cancel_requested or anthropic_batch.get("cancel_initiated_at") is not None
    if processing == "canceling":
        return "cancelling"
    if processing != "ended":
        return "cancelling" if cancel_requested else "in_progress"
    if finalizing:
        return "cancelling" if cancelled else "finalizing"
    if cancelled:
        return "cancelled"
    if _count(anthropic_batch, "expired") > 0:
        return "expired"
    return "completed"


def request_counts(batches: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """OpenAI's ``{total, completed, failed}`` from one or more Message Batches."""
    group = [batches] if isinstance(batches, Mapping) else list(batches)
    counts = {name: sum(_count(b, name) for b in group) for name in _COUNTS}
    return {
        "total": sum(counts.values()),
        "completed": counts["succeeded"],
        "failed": counts["errored"] + counts["canceled"] + counts["expired"],
    }


def combined(batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several Message Batches of one OpenAI batch, seen as one.

    ``processing_status`` is ``in_progress`` while any part is, else ``canceling`` while
    any part is, else ``ended``; counts are summed; ``created_at`` and
    ``cancel_initiated_at`` are the earliest given, ``expires_at`` the latest, ``ended_at``
    the latest once every part has ended (RFC 3339 strings sort as times when, as
    Anthropic's do, they share one format and zone).

    Raises:
      ValueError: no batch given.
    """
    if not batches:
        raise ValueError("no Message Batch to combine")
    statuses = {b.get("processing_status") for b in batches}
    status = (
        "in_progress"
        if "in_progress" in statuses
        else "canceling"
        if "canceling" in statuses
        else "ended"
    )

    def times(key: str) -> list[str]:
        return [v for b in batches if isinstance(v := b.get(key), str)]

    ended = times("ended_at")
    return {
        "processing_status": status,
        "request_counts": {name: sum(_count(b, name) for b in batches) for name in _COUNTS},
        "created_at": min(times("created_at"), default=None),
        "expires_at": max(times("expires_at"), default=None),
        "cancel_initiated_at": min(times("cancel_initiated_at"), default=None),
        "ended_at": max(ended) if status == "ended" and len(ended) == len(batches) else None,
    }


def unix_seconds(timestamp: object) -> int | None:
    """An RFC 3339 timestamp (Anthropic's) as Unix seconds (OpenAI's); None if absent or
    unreadable."""
    if not isinstance(timestamp, str):
        return None
    try:
        return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def _count(batch: Mapping[str, Any], name: str) -> int:
    counts = batch.get("request_counts")
    value = counts.get(name) if isinstance(counts, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
