"""Priority lanes: interactive work goes first, deferrable work gets a bounded share.

A request is *interactive* (someone waits for it: the default) or *deferrable* (a background
response, a flex request falling back to realtime: it said it can wait). Where requests queue
for a scarce resource -- the admission gate's slots, the dispatcher's upstream tokens -- each
lane has its own queue, and whenever a slot or token comes free while *both* lanes have
waiters, a :class:`LaneChooser` says whose turn it is.

The rule: interactive first, except that deferrable work gets at least ``share`` of the
admissions made while both lanes wait. It is kept as an integer credit: every contended
admission adds ``share`` to it, a deferrable admission spends one whole unit, and the
deferrable lane's turn comes as soon as the credit reaches a unit. So with ``share = 0.2``
the contended order is I I I I D I I I I D ...: over any contended stretch of ``n``
admissions the deferrable lane gets ``floor(n * share)`` or more, and an interactive waiter
is passed over at most once in every ``1 / share`` admissions. Why a credit and not strict
priority: with strict priority a steady interactive load starves deferrable work for ever
(a background response would wait until its own deadline and fail); with a share it
completes, slowed by a bounded factor. Why not weighted fair queuing between lanes, as
between tenants: the lanes are not peers -- an uncontended deferrable request takes what is
free, but under contention the interactive lane keeps ``1 - share`` of the admissions
however many deferrable requests are queued.

The credit resets whenever an admission is made while only one lane waits: a lane that was
idle banks nothing, so a burst of deferrable work after a quiet spell does not jump ahead of
interactive waiters, and a burst of interactive work does not owe the deferrable lane for
the time it was alone.

Pure logic, no trio and no I/O: the gate's ``FairQueue`` and the dispatcher ask it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, Literal, TypeAlias, final

__all__ = [
    "DEFAULT_DEFERRABLE_SHARE",
    "DEFAULT_LANES",
    "LANES",
    "Lane",
    "LaneChooser",
    "LanePolicy",
    "lane_of",
]

Lane: TypeAlias = Literal["interactive", "deferrable"]
LANES: Final[tuple[Lane, Lane]] = ("interactive", "deferrable")

DEFAULT_DEFERRABLE_SHARE: Final = 0.2
"""One contended admission in five goes to deferrable work (``LANE_DEFERRABLE_SHARE``)."""

# Credit ticks per admission: 720720 (the least common multiple of 1..16) makes shares such
# as 0.2, 0.25, 0.1 or 1/3 exact, so "one in five" is exactly one in five.
_UNIT: Final = 720720 << 20


def lane_of(deferrable: bool) -> Lane:
    return "deferrable" if deferrable else "interactive"


@final
@dataclass(frozen=True, slots=True)
class LanePolicy:
    """How lanes share a contended resource (``LANES_ENABLED``, ``LANE_DEFERRABLE_SHARE``).

    Attributes:
      enabled: ``False`` puts every request in the interactive lane: one queue, as before
        lanes existed (for comparison, e.g. the bench's mixed scenario).
      deferrable_share: the least fraction of contended admissions that go to the
        deferrable lane, in ``(0, 0.5]``; the interactive lane keeps the rest.
    """

    enabled: bool = True
    deferrable_share: float = DEFAULT_DEFERRABLE_SHARE

    def __post_init__(self) -> None:
        if not 0 < self.deferrable_share <= 0.5:
            raise ValueError(f"deferrable_share must be in (0, 0.5], not {self.deferrable_share}")

    def lane(self, deferrable: bool) -> Lane:
        """The lane a request goes in: always interactive when lanes are off."""
        return "deferrable" if deferrable and self.enabled else "interactive"


DEFAULT_LANES: Final = LanePolicy()
"""Lanes on, with the default share."""


@final
class LaneChooser:
    """Whose turn it is when both lanes wait; see the module's docstring for the rule."""

    __slots__ = ("_credit", "_step")

    def __init__(self, deferrable_share: float = DEFAULT_DEFERRABLE_SHARE) -> None:
        share = Fraction(deferrable_share).limit_denominator(1_000_000)
        self._step = max(1, math.ceil(share * _UNIT))  # rounded up: at least the share
        self._credit = 0

    def pick(self, interactive: bool, deferrable: bool) -> Lane | None:
        """The lane of the next admission, given which lanes have (eligible) waiters;
        ``None`` when neither has. Pure: :meth:`admitted` records the admission."""
        if not deferrable:
            return "interactive" if interactive else None
        if not interactive:
            return "deferrable"
        return "deferrable" if self._credit + self._step >= _UNIT else "interactive"

    def admitted(self, lane: Lane, contended: bool) -> None:
        """Record an admission of ``lane``; ``contended``: both lanes had waiters."""
        if not contended:
            self._credit = 0
            return
        self._credit += self._step
        if lane == "deferrable":
            self._credit = max(0, self._credit - _UNIT)

    def take(self, interactive: bool, deferrable: bool) -> Lane | None:
        """:meth:`pick`, and record the admission."""
        lane = self.pick(interactive, deferrable)
        if lane is not None:
            self.admitted(lane, interactive and deferrable)
        return lane
