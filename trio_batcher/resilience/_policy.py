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

from ..errors import ProxyError
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
    signal: Signal
    retry_after: float | None


def classify(exc: ProxyError) -> Failure:
    """Name what went wrong in one attempt.

    ``upstream_timeout`` is the transport's connect timeout (10 s; reads and writes have none,
    the request's deadline bounds them): retryable, and the deadline check decides whether
    another attempt fits. ``upstream_connection_error`` includes a kept-alive connection the
    upstream closed just as it was reused, which a retry on a fresh connection fixes.
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
    return Failure(signal, exc.retry_after)


def retry_delay(
    failure: Failure, retries_done: int, config: ResilienceConfig, rng: Callable[[], float]
) -> float | None:
    """Seconds to wait before the next attempt, or ``None`` when the policy says stop.

    ``retry-after`` is honoured exactly when it is at most ``max_wait_s`` (longer: give up,
    the caller would rather hear now). Without one the wait is full jitter:
    ``rng() * min(backoff_cap_s, backoff_base_s * 2**retries_done)``, ``rng`` in [0, 1).
    """
    if failure.signal not in RETRYABLE or retries_done >= config.max_retries:
        return None
    if failure.retry_after is not None:
        return failure.retry_after if failure.retry_after <= config.max_wait_s else None
    ceiling = min(config.backoff_cap_s, config.backoff_base_s * 2.0**retries_done)
    return rng() * ceiling
