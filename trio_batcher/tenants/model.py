"""What a tenant is: its name, the hashes of its keys, its share of the gate, its limits.

A ``Tenant`` is plain immutable data, built by the tenants file loader (``keys_file``) or
derived from a ``PROXY_API_KEYS`` key, and read by whoever enforces it (the gate, the rate
limiters in ``buckets``, the budget check in ``spend``). Nothing here does I/O.

Key hygiene. A tenant holds the SHA-256 hex digests of its keys, never a key: ``hash_key``
is the only place a presented key is touched, and its result is what every lookup, store and
listing uses. The digests are not shown by ``repr`` either (only their count), so a tenant can
be logged whole. A digest of a ``tb-`` key (256 random bits) reveals nothing usable; a digest
prefix of 8 hex characters (what ``keys list`` prints) even less.
"""

from __future__ import annotations

import calendar
import hashlib
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Final, Literal, TypeAlias, final

__all__ = [
    "ANONYMOUS",
    "Budget",
    "BudgetPeriod",
    "Tenant",
    "TenantOrigin",
    "hash_key",
    "proxy_key_tenant_name",
]

ANONYMOUS: Final = "anonymous"
"""The tenant of every request when no key is configured anywhere (authentication off)."""

PROXY_KEY_PREFIX: Final = "key-"
"""Names ``key-<8 hex>`` are the tenants ``PROXY_API_KEYS`` keys become; the file may not use
the prefix, so such a name always means the same thing."""

TenantOrigin: TypeAlias = Literal["file", "proxy_api_keys", "anonymous"]

_HOUR: Final = 3600


def hash_key(key: str) -> str:
    """The SHA-256 hex digest (lower case) of a client key: the only form a key is kept in."""
    return hashlib.sha256(key.encode()).hexdigest()


def proxy_key_tenant_name(digest: str, length: int = 8) -> str:
    """The tenant name of a ``PROXY_API_KEYS`` key, from its digest: ``key-<first 8 hex>``.

    A name made from the digest, not the key, can be shown in metrics and logs: the first
    32 bits of a SHA-256 say nothing about the key. ``length`` grows only if two keys'
    digests share a prefix (one chance in four billion per pair)."""
    return f"{PROXY_KEY_PREFIX}{digest[:length]}"


@final
@dataclass(frozen=True)
class BudgetPeriod:
    """What a budget is counted over: the calendar month (UTC), or the last ``days`` days.

    Spend is kept per UTC hour (``SpendStore``), so a rolling window is a whole number of
    hours: it starts at the beginning of the hour ``days`` days ago, covering the last
    ``days`` days and up to one hour more, so no ``days``-day window ever spends more than
    the budget.
    """

    days: int | None = None  # None: the calendar month, UTC

    @property
    def monthly(self) -> bool:
        return self.days is None

    def start(self, now: float) -> int:
        """The first second (Unix time, a whole hour) whose spend counts at ``now``."""
        if self.days is None:
            t = time.gmtime(now)
            return calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))
        return hour_of(now - self.days * 86_400)

    def next_change(self, now: float) -> int:
        """The earliest time the spend counted can go down: the next month, or (rolling)
        the next hour, when the oldest hour leaves the window."""
        if self.days is None:
            t = time.gmtime(now)
            year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
            return calendar.timegm((year, month, 1, 0, 0, 0))
        return hour_of(now) + _HOUR

    def describe(self) -> str:
        return "monthly" if self.days is None else f"{self.days}-day rolling"

    def spelling(self) -> str:
        """As written in the tenants file: ``"monthly"`` or ``"30d"``."""
        return "monthly" if self.days is None else f"{self.days}d"


def hour_of(t: float) -> int:
    """The start (Unix time) of the UTC hour holding ``t``."""
    return math.floor(t / _HOUR) * _HOUR


@final
@dataclass(frozen=True)
class Budget:
    """At most ``usd`` spent per ``period``; reaching it stops the tenant's new requests."""

    usd: float
    period: BudgetPeriod = BudgetPeriod()

    def describe(self) -> str:
        return f"{self.period.describe()} budget of ${self.usd:,.2f}"


@final
@dataclass(frozen=True)
class Tenant:
    """One tenant, as the gateway enforces it.

    Attributes:
      name: unique, ``[A-Za-z0-9][A-Za-z0-9._-]*`` (at most 64): safe as a metrics label.
      key_hashes: SHA-256 hex digests of the tenant's keys (not shown by ``repr``).
      weight: its share when the gate queues, relative to the other tenants' (> 0).
      max_inflight: most gate slots it may hold at once (None: no cap of its own).
      max_queue: most of its requests waiting for a slot (None: no cap of its own).
      rpm, tpm: requests and tokens per minute (None: unlimited).
      budget: spend allowed per period (None: unlimited).
      models: exact model names or shell-style patterns (``fnmatch``: ``*``, ``?``,
        ``[...]``) matched case-sensitively; None allows every model.
      origin: where it came from (``keys list`` and logs say so).
    """

    name: str
    key_hashes: frozenset[str] = field(default=frozenset(), repr=False)
    weight: float = 1.0
    max_inflight: int | None = None
    max_queue: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    budget: Budget | None = None
    models: tuple[str, ...] | None = None
    origin: TenantOrigin = "file"

    def __repr__(self) -> str:
        shown = [f"name={self.name!r}", f"keys={len(self.key_hashes)}", f"weight={self.weight:g}"]
        for attr in ("max_inflight", "max_queue", "rpm", "tpm", "budget", "models"):
            value = getattr(self, attr)
            if value is not None:
                shown.append(f"{attr}={value!r}")
        if self.origin != "file":
            shown.append(f"origin={self.origin!r}")
        return f"Tenant({', '.join(shown)})"

    def allows_model(self, model: str) -> bool:
        """True when ``model`` (as the client named it) matches one of ``models``."""
        if self.models is None:
            return True
        return any(fnmatchcase(model, pattern) for pattern in self.models)

    @property
    def rate_limited(self) -> bool:
        return self.rpm is not None or self.tpm is not None


def unique_prefix_length(digests: Iterable[str], start: int = 8) -> int:
    """The shortest prefix length (from ``start``) that tells every digest apart."""
    digests = sorted(set(digests))
    length = start
    while length < 64 and len({d[:length] for d in digests}) < len(digests):
        length += 4
    return length
