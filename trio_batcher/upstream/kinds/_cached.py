"""A secret that expires: fetched off the event loop, cached, refreshed early, one at a time.

Both cloud kinds sign with short-lived credentials (AWS role credentials last about an
hour, a Google OAuth token as long), and both SDKs fetch them with blocking HTTP (the
instance metadata service, STS, Google's token endpoint). On a trio loop a blocking fetch
would stall every request of the process, so the fetch runs in a worker thread
(``trio.to_thread.run_sync``). Refreshing *before* expiry (``early_s``) means no request
is ever signed with credentials that lapse while it is in flight.

Invariants:

- at most one fetch runs at a time (a ``trio.Lock``); callers that arrive during it wait
  for it and share its result, so a burst of requests at expiry costs one token call;
- a failed refresh while the cached value is still valid keeps serving that value (the
  provider may be briefly down; the old token is good for ``early_s`` more), and is tried
  again after ``retry_s``; once the value has really expired the failure is raised;
- a fetch is not abandoned when the caller is cancelled: the thread finishes and its
  result is kept for the next caller (a half-done token exchange is not worth repeating).

Times are trio times (``trio.current_time()``), so the schedule is testable under
``autojump_clock``; the fetch reports *seconds left* (computed from the wall clock in the
thread), never a wall-clock instant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Generic, TypeVar, final

import trio

__all__ = ["CachedSecret", "Fetched"]

T = TypeVar("T")

# (the value, seconds until it expires; None for a value that never does)
Fetched = tuple[T, float | None]

# Five minutes before expiry: google-auth itself treats a token as expired 3 min 45 s early.
DEFAULT_EARLY_S: Final = 300.0
DEFAULT_RETRY_S: Final = 10.0


async def _in_thread(fetch: Callable[[], Fetched[T]]) -> Fetched[T]:
    return await trio.to_thread.run_sync(fetch)


@final
class CachedSecret(Generic[T]):
    """The cache. ``await get()`` returns a value valid for at least ``early_s`` more
    (or, while the provider fails, the last one still valid).

    Args:
      fetch: blocking; returns the value and its seconds left (``None``: never expires).
        Its exceptions propagate from ``get()`` when no valid value is cached.
      early_s: how long before expiry a value is refreshed.
      retry_s: how long a failing refresh waits before it is tried again while the cached
        value is still valid (and the least time between two refreshes of a value that
        comes back already inside its early window, so a provider that hands out
        nearly-expired credentials is not called on every request).
      run_sync: how ``fetch`` is run; a worker thread by default, a plain call in tests.
    """

    def __init__(
        self,
        fetch: Callable[[], Fetched[T]],
        *,
        early_s: float = DEFAULT_EARLY_S,
        retry_s: float = DEFAULT_RETRY_S,
        run_sync: Callable[[Callable[[], Fetched[T]]], Awaitable[Fetched[T]]] | None = None,
    ) -> None:
        self._fetch = fetch
        self._early_s = early_s
        self._retry_s = retry_s
        self._run_sync = run_sync or _in_thread
        self._lock = trio.Lock()
        self._value: T | None = None
        self._refresh_at = -float("inf")  # trio time at which the value is refreshed
        self._expires_at = -float("inf")  # trio time after which it is not served at all
        self.fetches = 0  # how many fetches were started (for tests and statistics)

    @property
    def refresh_at(self) -> float:
        """The trio time of the next refresh (``inf`` for a value that never expires)."""
        return self._refresh_at

    async def get(self) -> T:
        """The cached value, refreshed first if its early window has begun."""
        if self._value is not None and trio.current_time() < self._refresh_at:
            return self._value
        async with self._lock:
            now = trio.current_time()
            if self._value is not None and now < self._refresh_at:
                return self._value  # someone refreshed it while we waited
            self.fetches += 1
            try:
                value, ttl = await self._run_sync(self._fetch)
            except Exception:
                if self._value is not None and trio.current_time() < self._expires_at:
                    self._refresh_at = trio.current_time() + self._retry_s
                    return self._value
                raise
            now = trio.current_time()
            self._value = value
            if ttl is None:
                self._refresh_at = self._expires_at = float("inf")
            else:
                self._expires_at = now + ttl
                self._refresh_at = now + max(ttl - self._early_s, min(self._retry_s, ttl))
            return value
