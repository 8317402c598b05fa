"""Reading the upstream's rate-limit headers: how long until a resource at 0 comes back (pure).

Two spellings reach us. A success carries Anthropic's own
``anthropic-ratelimit-{resource}-remaining`` and ``-reset`` (an RFC 3339 instant). An error
has already been translated by ``upstream_error`` into OpenAI's ``x-ratelimit-remaining-{r}``
and ``x-ratelimit-reset-{r}`` (a Go duration from the moment it was built, a moment ago).
Both are read; anything that does not parse is ignored, never guessed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

__all__ = ["parse_go_duration", "ratelimit_hold"]

_RESOURCES: Final = ("requests", "tokens", "input-tokens", "output-tokens")
_GO_DURATION: Final = re.compile(
    r"(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?|(?P<ms>\d+(?:\.\d+)?)ms"
)


def parse_go_duration(text: str) -> float | None:
    """Seconds in a Go ``time.Duration`` string as ``go_duration`` writes it (``"1m2.5s"``,
    ``"20ms"``, ``"0s"``); ``None`` if it is not one."""
    match = _GO_DURATION.fullmatch(text.strip())
    if match is None or not any(match.groupdict().values()):
        return None
    if match["ms"] is not None:
        return float(match["ms"]) / 1000.0
    return int(match["h"] or 0) * 3600.0 + int(match["m"] or 0) * 60.0 + float(match["s"] or 0)


def _is_zero(value: str | None) -> bool:
    return value is not None and value.strip() == "0"


def ratelimit_hold(headers: Mapping[str, str], now: datetime, units: int = 1) -> float | None:
    """Seconds until an exhausted resource (remaining 0) has room for one more unit.

    Args:
      headers: response headers, any case.
      now: the wall-clock instant the headers are read at (timezone-aware).
      units: how many units must have refilled: the calls the proxy will release at once
        when the hold ends (its concurrency cap), so they do not all race for one unit.

    Returns:
      ``None`` when no resource is exhausted (or none says when it resets); otherwise the
      wait, ``0.0`` if the reset has already passed.
    """
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    hold: float | None = None
    for resource in _RESOURCES:
        wait: float | None = None
        limit = lower.get(f"anthropic-ratelimit-{resource}-limit")
        if _is_zero(lower.get(f"anthropic-ratelimit-{resource}-remaining")):
            wait = _seconds_until(lower.get(f"anthropic-ratelimit-{resource}-reset"), now)
        if wait is None and _is_zero(lower.get(f"x-ratelimit-remaining-{resource}")):
            raw = lower.get(f"x-ratelimit-reset-{resource}")
            wait = None if raw is None else parse_go_duration(raw)
            limit = lower.get(f"x-ratelimit-limit-{resource}")
        if wait is not None and limit is not None and limit.strip().isdigit() and int(limit) > 0:
            # The reset is when the bucket is *full* again; it refills continuously, so
            # ``units`` are back after reset * units / limit. A request that needs more than
            # what has refilled by then is answered 429 with an exact retry-after, which
            # holds new calls too.
            wait *= min(units, int(limit)) / int(limit)
        if wait is not None and (hold is None or wait > hold):
            hold = wait
    return hold


def _seconds_until(reset: str | None, now: datetime) -> float | None:
    if reset is None:
        return None
    try:
        at = datetime.fromisoformat(reset.strip())
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    seconds = (at - now).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
