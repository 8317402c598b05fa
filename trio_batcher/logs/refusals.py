"""Every 4xx the gateway makes itself, logged at INFO with its reason, at most once per
route and reason a minute.

Why: a misconfigured client (a new beta, a wrong path, a stale key) fails every request
the same way, and before this the only trace was an access-log line, if that was on. One
line a minute per (route, reason) shows it without a flood; the next line for that pair
says how many were left out since the last one, and at DEBUG every one is written.

Errors relayed from an upstream are not refusals of the gateway's: the request's own
line (``decisions``) carries them. The route is a family (``/v1/files/...``), never a whole
path, which may hold object ids; the tenant is its name, never its key.

Memory is bounded: at most ``capacity`` (route, reason) pairs are remembered, the least
recently seen forgotten first (a forgotten pair's left-out count is lost with it).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

from ..errors import ProxyError
from .formatting import Fields

__all__ = ["RefusalLog", "route_family"]

_MAX_SEGMENTS: Final = 2
_MAX_ROUTE_CHARS: Final = 80


@dataclass(slots=True)
class _Seen:
    logged_at: float
    left_out: int = 0


@final
class RefusalLog:
    """The rate-limited log of the gateway's own refusals (module doc).

    Args:
      logger: where the lines go (INFO, and DEBUG for the ones left out).
      interval: seconds between two lines for one (route, reason).
      capacity: the most (route, reason) pairs remembered.
      clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        interval: float = 60.0,
        capacity: int = 512,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger or logging.getLogger("trio_batcher.refusals")
        self._interval = interval
        self._capacity = capacity
        self._clock = clock
        self._seen: OrderedDict[tuple[str, str], _Seen] = OrderedDict()

    def refused(
        self,
        *,
        status: int,
        reason: str,
        method: str,
        route: str,
        door: str | None = None,
        tenant: str | Callable[[], str | None] | None = None,
        param: str | None = None,
    ) -> None:
        """Note one refusal: ``reason`` is the error's code (or type); ``tenant`` a name,
        or a callable asked only if a line is written."""
        if not self._log.isEnabledFor(logging.INFO):
            return
        now = self._clock()
        key = (f"{method} {route}", reason if param is None else f"{reason}:{param}")
        seen = self._seen.get(key)
        if seen is not None and now - seen.logged_at < self._interval:
            self._seen.move_to_end(key)
            seen.left_out += 1
            if self._log.isEnabledFor(logging.DEBUG):
                self._write(logging.DEBUG, status, reason, method, route, door, tenant, param, None)
            return
        if seen is None:
            self._seen[key] = _Seen(now)
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            since = None
        else:
            self._seen.move_to_end(key)
            since = (seen.left_out, now - seen.logged_at)
            seen.logged_at, seen.left_out = now, 0
        self._write(logging.INFO, status, reason, method, route, door, tenant, param, since)

    def answered(
        self,
        exc: ProxyError,
        *,
        method: str,
        route: str,
        door: str | None = None,
        tenant: str | Callable[[], str | None] | None = None,
    ) -> None:
        """Note ``exc`` if it is a 4xx of the gateway's own making (not an upstream's
        answer relayed, which has an ``upstream_status``)."""
        if 400 <= exc.status < 500 and exc.upstream_status is None:
            self.refused(
                status=exc.status,
                reason=exc.code or exc.type,
                method=method,
                route=route,
                door=door,
                tenant=tenant,
                param=exc.param,
            )

    def _write(
        self,
        level: int,
        status: int,
        reason: str,
        method: str,
        route: str,
        door: str | None,
        tenant: str | Callable[[], str | None] | None,
        param: str | None,
        since: tuple[int, float] | None,
    ) -> None:
        fields = Fields(
            {
                "status": status,
                "reason": reason,
                "param": param,
                "method": method,
                "route": route,
                "door": door,
                "tenant": tenant() if callable(tenant) else tenant,
                "left_out": since[0] if since is not None and since[0] else None,
            }
        )
        more = ""
        if since is not None and since[0]:
            more = f" (and {since[0]} more like it in the {since[1]:.0f} s before this one)"
        self._log.log(level, "request refused %s%s", fields, more, extra={"fields": fields})

    def __len__(self) -> int:
        return len(self._seen)


def route_family(path: str, served: str | None = None) -> str:
    """The route to log for ``path``: ``served`` (the route pattern that matched, when
    one did) as it is, else the path's first segments with ``/...`` for the rest, so an
    object id in it is never logged and the routes of one family share a line."""
    if served is not None:
        return served
    segments = [s for s in path.split("/") if s]
    family = "/" + "/".join(segments[:_MAX_SEGMENTS])
    if len(segments) > _MAX_SEGMENTS:
        family += "/..."
    return family[:_MAX_ROUTE_CHARS]
