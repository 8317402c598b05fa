"""Which upstream failures are worth another attempt, and after how long (pure, no I/O).

The facts a decision needs are on the ``ProxyError`` the upstream client raised: the
upstream's own status (``upstream_status``), the ``retry-after`` it sent (``retry_after``),
and our ``code`` for failures that never got an answer (``upstream_connection_error``,
``upstream_timeout``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, final

from ...errors import ProxyError
from ._config import ResilienceConfig

__all__ = ["Failure", "Signal", "classify", "retry_delay"]

Signal: TypeAlias = Literal[
    "rate_limited",  # 429 with retry-after: a rate limit that will pass
    "spend_limited",  # 429 without retry-after: a spend limit, retrying cannot help
    "overloaded",  # 529
    "server_error",  # 500, 502, 503
    "timeout",  # our read/connect timeout, or the upstream's own 504
    "connect_error",  # the upstream could not be reached, or the connection broke
    "rejected",  # any other upstream 4xx: the request itself is at fault
    "other",  # anything else (a malformed answer...): not retried
]

RETRYABLE: Final[frozenset[Signal]] = frozenset(
    {"rate_limited", "overloaded", "server_error", "timeout", "connect_error"}
)
# Signals that mean "too much traffic": they open cooldowns (with a retry-after) and make
# the adaptive limit back off.
OVERLOAD: Final[frozenset[Signal]] = frozenset({"rate_limited", "overloaded", "timeout"})
# Signals that say nothing bad about the upstream's health.
CLEAN: Final[frozenset[Signal]] = frozenset({"rejected"})


@final
@dataclass(frozen=True)
class Failure:
    """One failed attempt. ``should_retry`` is the upstream's own verdict
    (``x-should-retry: true|false``, which Anthropic's SDKs obey), when it gave one."""

    signal: Signal
    retry_after: float | None
    should_retry: bool | None = None

    @property
    def retryable(self) -> bool:
        return self.signal in RETRYABLE if self.should_retry is None else self.should_retry


def classify(exc: ProxyError) -> Failure:
    """Name what went wrong in one attempt.

    ``upstream_timeout`` is the transport's connect timeout (10 s; reads and writes have none,
    the request's deadline bounds them): retryable, and the deadline check decides whether
    another attempt fits. ``upstream_connection_error`` is an upstream that could not be reached
    or whose connection broke, including a reused connection closed after part of the request
    went out: the upstream may have read and billed it, so only this policy may send it again
    (the pool itself resends only a request that provably never left).
    """
    status = exc.upstream_status
    signal: Signal
    if status == 429:
        signal = "rate_limited" if exc.retry_after is not None else "spend_limited"
    elif status == 529:
        signal = "overloaded"
    elif status in (500, 502, 503):
        signal = "server_error"
    elif status == 504 or (status is None and exc.code == "upstream_timeout"):
        signal = "timeout"
    elif status is None and exc.code == "upstream_connection_error":
        signal = "connect_error"
    elif status is not None and 400 <= status < 500:
        signal = "rejected"
    else:
        signal = "other"
    verdict = exc.headers.get("x-should-retry", "").strip().lower()
    should_retry = {"true": True, "false": False}.get(verdict)
    return Failure(signal, exc.retry_after, should_retry)


def retry_delay(
    failure: Failure, retries_done: int, config: ResilienceConfig, rng: Callable[[], float]
) -> float | None:
    """Seconds to wait before the next attempt, or ``None`` when the policy says stop.

    ``retry-after`` is honoured exactly when it is at most ``max_wait_s`` (longer: give up,
    the caller would rather hear now). The upstream's ``x-should-retry`` overrides the
    signal's own verdict either way. Without ``retry-after`` the wait is full jitter:
    ``rng() * min(backoff_cap_s, backoff_base_s * 2**retries_done)``, ``rng`` in [0, 1).
    """
    if not failure.retryable or retries_done >= config.max_retries:
        return None
    if failure.retry_after is not None:
        return failure.retry_after if failure.retry_after <= config.max_wait_s else None
    ceiling = min(config.backoff_cap_s, config.backoff_base_s * 2.0**retries_done)
    return rng() * ceiling
