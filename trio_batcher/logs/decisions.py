"""What the gateway decided for one request, as one DEBUG line when it ends.

Why: at 3 a.m. the question is "what happened to this request": which door it came in
by, whose it was, how long it queued at the gate and in a window, which upstream took
it under which model id, what failed over and why, and how it ended. The observatory
counts all that in aggregate; this says it per request.

Zero cost when DEBUG is off: the pipeline asks ``decision_notes()`` once per request,
which is ``None`` unless the logger is enabled for DEBUG, and every stage that adds to the
notes (the gate, the fleet's attempts) does so only when it holds some. Nothing here
reads a body or a header: the fields are the door, the tenant's name, the model names,
upstream names, statuses and times.
"""

from __future__ import annotations

import logging
from typing import Final, final

from .formatting import Fields

__all__ = ["DecisionNotes", "decision_notes", "log", "log_failover"]

log: Final = logging.getLogger("trio_batcher.requests")


@final
class DecisionNotes:
    """The decisions of one request, noted as they are made (module doc).

    Attributes:
      gate_wait: seconds from arrival to the admission gate's slot (tenant checks
        included); None if it never got one.
      slot_wait: seconds spent waiting for upstream slots (the upstream's cap), all
        attempts together.
      attempts: each upstream attempt, ``upstream:outcome`` (``ok``, or the failure's
        cause: ``overloaded``, ``rate_limited``, ``429``...), in order.
      upstream_kind, model_id: the last attempt's upstream kind and the model id it was
        sent under.
    """

    __slots__ = ("attempts", "gate_wait", "model_id", "slot_wait", "upstream_kind")

    def __init__(self) -> None:
        self.gate_wait: float | None = None
        self.slot_wait = 0.0
        self.attempts: list[str] = []
        self.upstream_kind: str | None = None
        self.model_id: str | None = None

    def attempt(self, upstream: str, kind: str, model_id: str, outcome: str) -> None:
        self.attempts.append(f"{upstream}:{outcome}")
        self.upstream_kind = kind
        self.model_id = model_id

    def done(
        self,
        *,
        door: str,
        tenant: str | None,
        model: str,
        stream: bool,
        status: int,
        upstream: str | None,
        arrived_to_now: float,
        queue: float,
        upstream_time: float | None,
        ttft: float | None,
    ) -> None:
        """Write the request's line (``request done door=... status=...``)."""
        fields = Fields(
            {
                "door": door,
                "tenant": tenant,
                "model": model,
                "stream": stream,
                "upstream": upstream,
                "kind": self.upstream_kind,
                "model_id": self.model_id,
                "attempts": len(self.attempts),
                "tried": ",".join(self.attempts) if len(self.attempts) > 1 else None,
                "status": status,
                "gate_ms": None if self.gate_wait is None else _ms(self.gate_wait),
                "queue_ms": _ms(queue),
                "slot_wait_ms": _ms(self.slot_wait) if self.attempts else None,
                "upstream_ms": None if upstream_time is None else _ms(upstream_time),
                "ttft_ms": None if ttft is None else _ms(ttft),
                "total_ms": _ms(arrived_to_now),
            }
        )
        log.debug("request done %s", fields, extra={"fields": fields})


def decision_notes() -> DecisionNotes | None:
    """Fresh notes for a request when its line will be written (DEBUG on), else None."""
    return DecisionNotes() if log.isEnabledFor(logging.DEBUG) else None


def log_failover(
    *,
    door: str,
    tenant: str | None,
    model: str,
    from_upstream: str,
    to_upstream: str,
    cause: str,
) -> None:
    """A DEBUG line for a failover (or a retry, when ``to_upstream`` is the same one)."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    what = "retry" if from_upstream == to_upstream else "failover"
    fields = Fields(
        {
            "door": door,
            "tenant": tenant,
            "model": model,
            "from": from_upstream,
            "to": to_upstream,
            "cause": cause,
        }
    )
    log.debug("request %s %s", what, fields, extra={"fields": fields})


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
