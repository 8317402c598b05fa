"""The resilience knobs, validated once, shared by the policy, the budget and the controllers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import final

__all__ = ["ResilienceConfig"]


@final
@dataclass(frozen=True)
class ResilienceConfig:
    """Every tunable of the resilience layer; the defaults are the documented settings.

    Attributes:
      max_retries: retries per request after its first attempt (``UPSTREAM_MAX_RETRIES``);
        0 turns retries off.
      backoff_base_s: the full-jitter ceiling of the first retry; it doubles per retry.
      backoff_cap_s: the full-jitter ceiling never exceeds this.
      max_wait_s: the longest ``retry-after`` honoured (``UPSTREAM_RETRY_MAX_WAIT_S``): a
        longer one is not retried but surfaced, and no cooldown lasts longer than this.
      budget_ratio: retries allowed per request in the budget window (``RETRY_BUDGET_RATIO``).
      budget_window_s: how far back the budget counts requests and retries.
      budget_min_retries: retries allowed per window however quiet the server is, so a lone
        request can still retry.
      coordinated: share cooldowns between requests (``UPSTREAM_COORDINATED_BACKOFF``); off,
        each request only honours its own ``retry-after``.
      adaptive: AIMD on the upstream limiter (``BATCH_ADAPTIVE``).
      decrease_factor: the AIMD multiplicative decrease.
    """

    max_retries: int = 2
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 8.0
    max_wait_s: float = 60.0
    budget_ratio: float = 0.1
    budget_window_s: float = 10.0
    budget_min_retries: int = 2
    coordinated: bool = True
    adaptive: bool = False
    decrease_factor: float = 0.9

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.budget_min_retries < 0:
            raise ValueError("max_retries and budget_min_retries must be >= 0")
        for name in ("backoff_base_s", "backoff_cap_s", "max_wait_s", "budget_ratio"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, not {value}")
        if not (math.isfinite(self.budget_window_s) and self.budget_window_s > 0):
            raise ValueError(f"budget_window_s must be finite and > 0, not {self.budget_window_s}")
        if not 0 < self.decrease_factor < 1:
            raise ValueError(f"decrease_factor must be in (0, 1), not {self.decrease_factor}")
