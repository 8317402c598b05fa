"""The latency model: when each output token leaves the simulator.

Pure: ``schedule`` maps a token count, the config and an RNG to offsets from the start
of the request, so it is tested as data. The app sleeps until ``start + offset`` (absolute
deadlines, so per-event work does not accumulate as drift).
"""

from __future__ import annotations

import random

from .config import SimulatorConfig


def schedule(n_tokens: int, config: SimulatorConfig, rng: random.Random) -> list[float]:
    """Offsets in seconds, from the request's start, at which tokens 0..n-1 are sent.

    Token 0 is sent after ``ttft_ms``; each later one ``1 / tokens_per_s`` after the
    previous (no gap when ``tokens_per_s`` is 0). With ``jitter == 0`` the result is exactly
    ``ttft_ms / 1000 + i / tokens_per_s`` and the RNG is not used; otherwise every delay is
    scaled by ``1 + jitter * u`` with one ``u ~ U(-1, 1)`` drawn per token, so offsets stay
    non-decreasing.
    """
    if n_tokens <= 0:
        return []
    ttft = config.ttft_ms / 1000
    rate = config.tokens_per_s
    jitter = config.jitter
    if jitter == 0:
        if rate == 0:
            return [ttft] * n_tokens
        return [ttft + i / rate for i in range(n_tokens)]
    t = ttft * (1 + jitter * rng.uniform(-1, 1))
    if rate == 0:
        return [t] * n_tokens
    step = 1 / rate
    offsets = [t]
    for _ in range(n_tokens - 1):
        t += step * (1 + jitter * rng.uniform(-1, 1))
        offsets.append(t)
    return offsets


def reply_delay(offsets: list[float], config: SimulatorConfig) -> float:
    """When a non-streamed reply is sent: with its last token (``ttft`` when it has none)."""
    return offsets[-1] if offsets else config.ttft_ms / 1000
