"""The retry budget: retries may add at most a fixed fraction to recent upstream traffic.

Finagle's ``RetryBudget`` shape: over a sliding window of ``window`` seconds, retries may
number at most ``min_retries + floor(ratio * requests)``, where ``requests`` counts requests
(first attempts only, so retries cannot earn themselves budget). When every call fails, the
upstream sees at most ``(1 + ratio) * requests + min_retries`` attempts per window, whatever
``max_retries`` says; ``min_retries`` lets a lone request retry on a quiet server.
"""

from __future__ import annotations

import math
from collections import deque
from typing import final

import trio

__all__ = ["RetryBudget"]


@final
class RetryBudget:
    """Counts requests and retries in a sliding window of ``trio.current_time()``."""

    def __init__(self, ratio: float, *, window: float, min_retries: int) -> None:
        self._ratio = ratio
        self._window = window
        self._min = min_retries
        # Timestamps within the last `window` seconds, oldest first; bounded by the request
        # rate times the window (the admission gate bounds the rate), pruned on every use.
        self._requests: deque[float] = deque()
        self._retries: deque[float] = deque()

    def record_request(self) -> None:
        """A new request arrived (its first attempt is about to happen)."""
        now = trio.current_time()
        self._prune(now)
        self._requests.append(now)

    def try_spend(self) -> bool:
        """Take one retry from the budget; ``False`` (and nothing taken) when it is spent."""
        now = trio.current_time()
        self._prune(now)
        if len(self._retries) >= self.allowed(prune=False):
            return False
        self._retries.append(now)
        return True

    def allowed(self, *, prune: bool = True) -> int:
        """Retries the current window allows in total (spent ones included)."""
        if prune:
            self._prune(trio.current_time())
        # The epsilon keeps 0.29 * 100 (= 28.999999999999996) from rounding down to 28.
        return self._min + math.floor(self._ratio * len(self._requests) + 1e-9)

    def _prune(self, now: float) -> None:
        horizon = now - self._window
        for stamps in (self._requests, self._retries):
            while stamps and stamps[0] <= horizon:
                stamps.popleft()
