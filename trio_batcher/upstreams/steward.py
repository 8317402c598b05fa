"""One upstream's stewardship: its client, its own cap, cooldowns, retry budget and AIMD.

Every deployment behind the gateway is looked after on its own, because each fails on its
own: a 529 storm on one Anthropic organisation says nothing about Bedrock in another
region. So a ``Steward`` holds, for one upstream: the client for its kind
(``upstream.caller.MessagesCaller``), its ``Resilience`` (cooldowns, retry budget, the
adaptive limit: ``upstream.resilience``), its ``trio.CapacityLimiter`` (``max_concurrency``;
none without one), and its *health*: after a failure that says the upstream itself is in
trouble (overloaded, a 5xx, unreachable, too slow) it is unhealthy for a while, which the
router reads as "last resort" (``routing``), doubling with each failure in a row and ended by
the first success. That is the cooldown a failover starts even when the upstream sent no
``retry-after`` (Anthropic's 529s usually send none): the upstream is tried again only after
it, unless nothing else can serve the request.

A steward knows nothing of the others; the fleet (``fleet``) routes among them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Final, final

import trio

from ..admission.shared_slots import SharedSlots
from ..json_text import strict_loads
from ..upstream.caller import MessagesCaller
from ..upstream.request import UpstreamRequest, encode_body
from ..upstream.resilience import Failure, Resilience
from .config import UpstreamSpec
from .routing import UpstreamState, snapshot

__all__ = ["UNHEALTHY_BASE_S", "UNHEALTHY_MAX_S", "Steward"]

# How long an upstream counts as unhealthy after a failure of its own; doubled per failure
# in a row, up to the maximum. One second is about a 529 storm's shortest breath; a minute
# keeps a dead region from costing every request a failed attempt.
UNHEALTHY_BASE_S: Final = 1.0
UNHEALTHY_MAX_S: Final = 60.0
# The failures that say something about the upstream rather than the request or the model.
_ITS_OWN: Final = frozenset({"overloaded", "server_error", "connect_error", "timeout"})


@final
class Steward:
    """One upstream (see the module doc). Not thread-safe: one trio thread owns it.

    Args:
      spec: the upstream as configured.
      caller: its client.
      resilience: its own cooldowns, retry budget and adaptive limit.
      index: its position in the configuration (the router's last tie-break).
      limiter: its cap; ``None`` makes one of ``spec.max_concurrency`` (none without one).
      clock: trio's, or a fake in tests.
    """

    def __init__(
        self,
        spec: UpstreamSpec,
        caller: MessagesCaller,
        resilience: Resilience,
        *,
        index: int = 0,
        limiter: trio.CapacityLimiter | None = None,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.caller = caller
        self.resilience = resilience
        self.index = index
        if limiter is None and spec.max_concurrency is not None:
            limiter = trio.CapacityLimiter(spec.max_concurrency)
        self.limiter = limiter
        self._clock = clock
        # Its cap's slots shared with the other instances (Redis), while there are some:
        # set by the cluster's owner (``runtime``); none by default.
        self.shared: Callable[[], SharedSlots | None] = lambda: None
        self._in_flight = 0
        self._strikes = 0
        self._unhealthy_until = -float("inf")

    @property
    def in_flight(self) -> int:
        """Calls holding a slot here now (a stream until its end)."""
        return self._in_flight

    @property
    def healthy(self) -> bool:
        return self._clock() >= self._unhealthy_until

    @property
    def unhealthy_until(self) -> float:
        return self._unhealthy_until

    def state(self, model: str, *, anthropic_only: bool = False) -> UpstreamState:
        """What the router needs to know of this upstream for a request for ``model``
        (one that needs Anthropic's own API, with ``anthropic_only``: no cloud serves it)."""
        model_id = self.model_id(model, anthropic_only=anthropic_only)
        cooling = model_id is not None and self.resilience.cooling_until(model_id) > self._clock()
        cap = self.spec.max_concurrency
        if self.limiter is not None and cap is not None:
            # The adaptive limit may hold the cap lower than configured.
            cap = min(cap, int(self.limiter.total_tokens))
        state = snapshot(
            self.spec,
            model,
            index=self.index,
            cooling=cooling,
            in_flight=self._in_flight,
            healthy=self.healthy,
        )
        if model_id is None and state.model_id is not None:
            state = replace(state, model_id=None)
        return state if cap == state.cap else replace(state, cap=cap)

    def model_id(self, model: str, *, anthropic_only: bool = False) -> str | None:
        """This upstream's id for ``model``; None if it does not serve it, or if the
        request needs Anthropic's own API and this is a cloud."""
        if anthropic_only and self.spec.kind != "anthropic":
            return None
        return self.spec.model_id(model)

    def request_for(self, request: UpstreamRequest, model_id: str) -> UpstreamRequest:
        """``request`` as this upstream receives it: ``model`` is its id for the model.

        An anthropic upstream reads the model from the body, so a mapped name is written
        into it (the client's bytes re-serialised once: the only change); a cloud puts
        the model in the path and drops it from the body (``upstream.kinds``).
        """
        if model_id == request.model:
            return request
        if self.spec.kind != "anthropic":
            return replace(request, model=model_id)
        outline = {**request.body, "model": model_id}
        if request.content is None:
            return replace(request, body=outline, model=model_id)
        parsed = strict_loads(request.content.decode())
        assert isinstance(parsed, dict)  # the door checked it is a JSON object
        parsed["model"] = model_id
        return replace(request, body=outline, model=model_id, content=encode_body(parsed))

    @asynccontextmanager
    async def slot(self, model_id: str | None = None) -> AsyncIterator[None]:
        """Hold one of this upstream's slots (waits while it is full); counted in flight.

        With shared slots (several instances, one Redis) the local token comes first (it
        bounds what this process asks for), then one of the cap's slots across the
        cluster, as the gateway's own cap is taken (``admission.shared_slots``); both are
        given back when the block ends, the shared one first (another instance may be
        waiting for it), shielded from cancellation.
        """
        limiter = self.limiter
        token = object()
        if limiter is not None:
            await limiter.acquire_on_behalf_of(token)
        shared = self.shared() if limiter is not None else None
        holder = shared.new_holder() if shared is not None else None
        try:
            if shared is not None and holder is not None:
                await shared.acquire(holder, model_id)
            self._in_flight += 1
            try:
                yield
            finally:
                self._in_flight -= 1
        finally:
            if shared is not None and holder is not None:
                with trio.CancelScope(shield=True):
                    await shared.release(holder)  # idempotent: also after a half-done acquire
            if limiter is not None:
                limiter.release_on_behalf_of(token)

    def failed(self, failure: Failure) -> None:
        """An attempt here failed: a failure of the upstream's own makes it unhealthy."""
        if failure.signal not in _ITS_OWN:
            return
        self._strikes += 1
        pause = min(UNHEALTHY_MAX_S, UNHEALTHY_BASE_S * 2.0 ** (self._strikes - 1))
        self._unhealthy_until = max(self._unhealthy_until, self._clock() + pause)

    def succeeded(self) -> None:
        """An attempt here succeeded: healthy again at once."""
        self._strikes = 0
        self._unhealthy_until = -float("inf")
