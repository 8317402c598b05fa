"""The soak's books: every client request's outcome, counted once.

Pure (no I/O, no clock), tested as data. ``classify`` turns what a client saw into one
``Result``, in the terms the proxy counts it in (``proxy_status``): an Anthropic client sees
529 where the proxy records 503, and an upstream 500 relayed as 500 where it records 502; a
stream that failed after its 200 counts under the status its error event stands for
(``pipeline.relay``: the status the same upstream error would have had before the first
byte, or the gateway's own error's). A Responses client sees that error as
``response.failed`` with only ``server_error`` or ``rate_limit_exceeded`` for a code, so
its status is read back from the message: an upstream error names its type there
(``(upstream overloaded_error)``), and the one gateway error after the start that is not a
502 is the deadline (504). A ``Ledger`` adds the results up; ``soak_checks.reconcile``
compares it with ``/metrics``. The 5xx it holds are attributed here too: to their own
request's fault, or to a period in which the simulator answered 529 (``overload_periods``,
``explain_5xx``, ``five_xx_summary``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, final

from .soak_plan import faults_that_may_5xx
from .sse import Api

__all__ = [
    "COOLDOWN",
    "GATE_REASONS",
    "LEFT",
    "OVERLOAD_SLACK_S",
    "SURFACES",
    "FiveXX",
    "Ledger",
    "Result",
    "classify",
    "explain_5xx",
    "five_xx_summary",
    "overload_periods",
    "proxy_status",
]

Kind: TypeAlias = Literal["ok", "error", "shed", "cooldown", "left", "failed"]

GATE_REASONS: Final = ("queue_full", "queue_timeout", "shutdown")
COOLDOWN: Final = "upstream_cooldown"
LEFT: Final = 499
SURFACES: Final[Mapping[Api, str]] = {
    "openai": "openai.chat",
    "anthropic": "anthropic.messages",
    "responses": "openai.responses",
}
_CAPACITY: Final = re.compile(r"at capacity \((\w+)\)")
_COOLDOWN: Final = re.compile(r"^The upstream is (?:rate limiting this gateway|overloaded); retry")
_STREAM_ERROR_STATUS: Final[Mapping[str, int]] = {
    "overloaded_error": 503,
    "rate_limit_error": 429,
    "timeout_error": 504,
}
# Responses' ``response.failed``: the upstream error's type, as the codec appends it to the
# message; the deadline's message (``pipeline.relay.deadline_error``); its two codes.
_UPSTREAM_TYPE: Final = re.compile(r"\(upstream (\w+)\)$")
_DEADLINE: Final = "REQUEST_TIMEOUT_S"
_RATE_LIMITED: Final = "rate_limit_exceeded"
_EXAMPLES: Final = 20

# A 503/529 up to this long after the simulator last answered 529 is the overload's doing:
# retries, cooldowns and the requests they held, all bounded by the soak's REQUEST_TIMEOUT_S.
OVERLOAD_SLACK_S: Final = 8.0 + 2.0


@final
@dataclass(frozen=True, slots=True)
class Result:
    """One request as its client saw it.

    Attributes:
      kind: ``ok``; ``error`` (an error answer, or a stream that ended in an error event);
        ``shed`` (by the gate, ``reason`` says why); ``cooldown`` (``upstream_cooldown``);
        ``left`` (the client went away; ``reason`` is the stage); ``failed`` (no answer the
        client could read: a transport error, a timeout -- never expected).
      status: the HTTP status seen (0: none); for a failed stream, its error's status.
      proxy_status: the status the proxy must have recorded (``None`` for a gate shed).
    """

    kind: Kind
    status: int = 0
    proxy_status: int | None = None
    reason: str | None = None


def proxy_status(api: Api, status: int) -> int:
    """The status the proxy records for an answer an ``api`` client saw as ``status``
    (OpenAI Chat and Responses clients see the gateway's own)."""
    if api == "anthropic":
        return {529: 503, 500: 502}.get(status, status)
    return status


def _error_fields(body: bytes) -> tuple[str | None, str | None, str]:
    """(code, type, message) of an error body, in either dialect."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None, None, ""
    if not isinstance(error, dict):
        return None, None, ""
    code, kind, message = error.get("code"), error.get("type"), error.get("message")
    return (
        code if isinstance(code, str) else None,
        kind if isinstance(kind, str) else None,
        message if isinstance(message, str) else "",
    )


def classify(
    api: Api,
    status: int,
    body: bytes = b"",
    stream_error: str | None = None,
    stream_message: str = "",
) -> Result:
    """What a complete answer means: ``status`` and, for an error, its ``body``; for a 200
    stream that ended in an error event, that event's type (``stream_error``: its
    ``error.type``, or in Responses its ``error.code``) and message (``stream_message``)."""
    if status == 200:
        if stream_error is None:
            return Result("ok", 200, 200)
        if api == "responses":
            return _responses_failed(stream_error, stream_message)
        failed = _STREAM_ERROR_STATUS.get(stream_error, 502)
        return Result("error", failed, failed, stream_error)
    code, kind, message = _error_fields(body)
    reason = code
    if api == "anthropic":
        found = _CAPACITY.search(message)
        if found:
            reason = found.group(1)
        elif _COOLDOWN.match(message):
            reason = COOLDOWN
        elif "shutting down" in message:
            reason = "shutdown"
    if reason in GATE_REASONS and status in (429, 503, 529):
        return Result("shed", status, None, reason)
    if reason == COOLDOWN:
        return Result("cooldown", status, proxy_status(api, status), COOLDOWN)
    return Result("error", status, proxy_status(api, status), reason or kind)


def _responses_failed(code: str, message: str) -> Result:
    """A Responses stream that ended in ``response.failed`` (or an ``error`` event): the
    upstream's error type if the message names one, else the gateway's own error."""
    found = _UPSTREAM_TYPE.search(message)
    if found:
        kind = found.group(1)
        failed = _STREAM_ERROR_STATUS.get(kind, 502)
        return Result("error", failed, failed, kind)
    if code == _RATE_LIMITED:
        failed = 429
    elif _DEADLINE in message:
        failed = 504
    else:
        failed = 502  # a truncated upstream stream, or anything else of the gateway's
    return Result("error", failed, failed, code)


@final
@dataclass(frozen=True, slots=True)
class FiveXX:
    """A 5xx a client saw (or a stream error standing for one), for attribution."""

    at: float  # seconds from the start of the run
    api: Api
    status: int
    reason: str | None
    fault: str | None


@final
@dataclass
class Ledger:
    """Counts of the soak's requests by outcome; ``add`` one per request sent."""

    offered: int = 0  # arrivals due: sent, or counted unsent
    sent: int = 0
    unsent_late: int = 0
    unsent_bound: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    by_door: dict[str, Counter[str]] = field(default_factory=dict)
    statuses: Counter[int] = field(default_factory=Counter)  # proxy_status of taken-on ones
    door_statuses: dict[str, Counter[int]] = field(default_factory=dict)
    cooldown_statuses: Counter[int] = field(default_factory=Counter)
    shed: Counter[str] = field(default_factory=Counter)
    left: Counter[str] = field(default_factory=Counter)
    door_left: dict[str, Counter[str]] = field(default_factory=dict)
    stream_left: Counter[str] = field(default_factory=Counter)  # streaming requests that left
    faults: Counter[str] = field(default_factory=Counter)
    streams_taken_on: int = 0  # streaming requests the proxy parsed and did not gate-shed
    streams_cooldown: int = 0
    five_xx: list[FiveXX] = field(default_factory=list)
    stores: Counter[str] = field(default_factory=Counter)  # store: true ones, by outcome
    stores_left_mid_stream: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    failure_examples: list[str] = field(default_factory=list)

    def add(
        self,
        result: Result,
        *,
        api: Api,
        stream: bool,
        fault: str | None,
        at: float,
        planned_leave: str | None = None,
        store: bool = False,
    ) -> None:
        """Count one request. ``stream`` counts only if the proxy got its whole body;
        ``store``: a Responses request that asked to be stored."""
        self.sent += 1
        self.kinds[result.kind] += 1
        self.by_door.setdefault(api, Counter())[result.kind] += 1
        if store:
            self.stores[result.kind] += 1
            self.stores_left_mid_stream += result.kind == "left" and result.reason == "mid_stream"
        if fault is not None:
            self.faults[fault] += 1
        parsed = stream and not (result.kind == "left" and result.reason in _BODY_STAGES)
        if result.kind == "failed":
            self.failures[result.reason or "unknown"] += 1
            if len(self.failure_examples) < _EXAMPLES:
                self.failure_examples.append(
                    f"{api} stream={stream} fault={fault} leave={planned_leave}: {result.reason}"
                )
            return
        if result.kind == "shed":
            self.shed[result.reason or "unknown"] += 1
        elif result.kind == "cooldown":
            assert result.proxy_status is not None
            self.cooldown_statuses[result.proxy_status] += 1
            self.streams_cooldown += parsed
        else:
            if result.kind == "left":
                stage = result.reason or "unknown"
                self.left[stage] += 1
                self.door_left.setdefault(api, Counter())[stage] += 1
                if stream:
                    self.stream_left[stage] += 1
            assert result.proxy_status is not None
            self.statuses[result.proxy_status] += 1
            self.door_statuses.setdefault(api, Counter())[result.proxy_status] += 1
            self.streams_taken_on += parsed
        if result.status >= 500:
            self.five_xx.append(FiveXX(at, api, result.status, result.reason, fault))

    def stored_range(self) -> tuple[int, int]:
        """How many responses the proxy must have stored: at least one per ``store: true``
        request read whole, at most one more per such request that ended in an error (a
        stream that failed is stored with its error) or left mid-stream (the terminal
        event may have been built before the proxy noticed)."""
        low = self.stores["ok"]
        return low, low + self.stores["error"] + self.stores_left_mid_stream

    def taken_on(self, api: Api | None = None) -> int:
        counts = self.statuses if api is None else self.door_statuses.get(api, Counter())
        return sum(counts.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "offered": self.offered,
            "sent": self.sent,
            "unsent_late": self.unsent_late,
            "unsent_bound": self.unsent_bound,
            "by_outcome": dict(sorted(self.kinds.items())),
            "by_door": {k: dict(sorted(v.items())) for k, v in sorted(self.by_door.items())},
            "proxy_statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "cooldown_statuses": {str(k): v for k, v in sorted(self.cooldown_statuses.items())},
            "shed_by_reason": dict(sorted(self.shed.items())),
            "left_by_stage": dict(sorted(self.left.items())),
            "faults_injected": dict(sorted(self.faults.items())),
            "client_5xx": len(self.five_xx),
            "store_true_by_outcome": dict(sorted(self.stores.items())),
            "failures": dict(sorted(self.failures.items())),
            "failure_examples": self.failure_examples,
        }


_BODY_STAGES: Final = frozenset({"before_body", "reset_mid_body"})


def explain_5xx(
    five: FiveXX, may_5xx: frozenset[str], overload_s: list[tuple[float, float]]
) -> bool:
    """Whether a fault explains a 5xx: its request carried one that may cause it, or it is
    an overload answer (503/529) inside one of the ``overload_s`` periods (seconds from the
    start in which the simulator answered 529, widened by the caller for retries)."""
    if five.fault in may_5xx:
        return True
    if five.status in (503, 529):
        return any(start <= five.at <= end for start, end in overload_s)
    return False


def overload_periods(sim_529: list[tuple[float, int]]) -> list[tuple[float, float]]:
    """Spans in which the simulator answered 529, widened by the retries they cause."""
    periods: list[tuple[float, float]] = []
    previous_t, previous_n = 0.0, 0
    for t, n in sim_529:
        if n > previous_n:
            start, end = previous_t - 1.0, t + OVERLOAD_SLACK_S
            if periods and start <= periods[-1][1]:
                periods[-1] = (periods[-1][0], end)
            else:
                periods.append((start, end))
        previous_t, previous_n = t, n
    return periods


def five_xx_summary(ledger: Ledger, overload: list[tuple[float, float]]) -> dict[str, Any]:
    may = faults_that_may_5xx()
    unexplained = [f for f in ledger.five_xx if not explain_5xx(f, may, overload)]
    by_status: dict[str, int] = {}
    for f in ledger.five_xx:
        by_status[str(f.status)] = by_status.get(str(f.status), 0) + 1
    return {
        "total": len(ledger.five_xx),
        "by_status": dict(sorted(by_status.items())),
        "explained_by_fault": sum(1 for f in ledger.five_xx if f.fault in may),
        "explained_by_overload": len(ledger.five_xx)
        - len(unexplained)
        - sum(1 for f in ledger.five_xx if f.fault in may),
        "unexplained": len(unexplained),
        "unexplained_examples": [
            {
                "t_s": round(f.at, 2),
                "door": f.api,
                "status": f.status,
                "reason": f.reason,
                "fault": f.fault,
            }
            for f in unexplained[:10]
        ],
    }
