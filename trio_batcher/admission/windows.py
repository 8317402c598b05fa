"""Admission windows (microbatching): requests that arrive close together are dispatched together.

The rules a :class:`WindowPolicy` sets for a ``Dispatcher`` (``dispatch.Dispatcher(limiter=...,
windows=WindowPolicy(...))``); how the dispatcher carries them out -- one task per window,
tokens in flush order -- is in ``_dispatcher``'s theory of operation.

At most one window is *open* at a time. A submitted ticket joins the open window, or opens a
new one. A window *flushes* -- is closed to newcomers and stamped with ``flushed_at`` --
exactly once, for the first of these reasons:

- ``size``: the ``max_size``-th ticket joins it; decided synchronously in ``submit_nowait``, so
  ``max_size`` arrivals at t=0 flush at t=0;
- ``time``: ``max_wait`` seconds after its FIRST ticket joined (a deadline fixed when the
  window opened, so the flush happens at exactly ``opened_at + max_wait``);
- ``drain``: ``close()`` flushes the open window at once, so shutdown drains it.

If every queued ticket leaves (``cancel()``) before the flush, the window is *abandoned* and
the next arrival opens a fresh window. Once flushed, a window's tickets receive tokens of the
dispatcher's ``CapacityLimiter`` in arrival order, after every window flushed before it, so
the upstream never sees more than ``total_tokens`` calls in flight and tickets start in
arrival order across windows too. ``window_timeout`` after its flush every ticket of the
window is done: any still waiting for a token or running then fails with 504
``window_timeout``, while those that finished keep their results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, TypeAlias, final

__all__ = ["FlushReason", "WindowPolicy"]

FlushReason: TypeAlias = Literal["size", "time", "drain"]


@final
@dataclass(frozen=True)
class WindowPolicy:
    """When a window flushes and how long its tickets may take (``BATCH_*`` settings).

    Attributes:
      max_size: a window flushes as soon as it holds this many tickets (>= 1).
      max_wait: seconds after a window's first ticket at which it flushes regardless
        (finite, >= 0).
      window_timeout: seconds after its flush by which every ticket of a window is done;
        any left then fail with 504 ``window_timeout``. May be ``math.inf``.
    """

    max_size: int
    max_wait: float
    window_timeout: float

    def __post_init__(self) -> None:
        if self.max_size < 1:
            raise ValueError(f"max_size must be >= 1, not {self.max_size}")
        if not 0 <= self.max_wait < math.inf:
            raise ValueError(f"max_wait must be finite and >= 0, not {self.max_wait}")
        if not self.window_timeout > 0:
            raise ValueError(f"window_timeout must be > 0, not {self.window_timeout}")
