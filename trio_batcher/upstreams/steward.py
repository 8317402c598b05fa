"""One upstream's stewardship: its client, its own cap, cooldowns, retry budget and AIMD.

Every deployment behind the gateway is looked after on its own, because each fails on its
own: a 529 storm on one Anthropic organisation says nothing about Bedrock in another
region. So a ``Steward`` holds, for one upstream: the client for its kind
(``upstream.caller.MessagesCaller``), its ``Resilience`` (cooldowns, retry budget, the
adaptive limit: ``upstream.resilience``), its ``trio.CapacityLimiter`` (``max_concurrency``;
none without one), and its *health*, a small circuit breaker:

- **open**: after a failure that says the upstream itself is in trouble (overloaded, a 5xx,
  unreachable, too slow) it is unhealthy for a pause, which the router reads as "last
  resort" (``routing``: tried only when nothing healthy can take the request). That is the
  cooldown a failover starts even when the upstream sent no ``retry-after`` (Anthropic's
  529s usually send none). The failures of calls that were already under way when it
  opened are the same incident and do not lengthen it.
- **half-open**: when the pause is over, *one* request probes it (while that probe runs, the
  upstream stays a last resort for the others), so a storm that lasts costs one failed
  attempt -- one failover, no client error -- per pause, not one per request in flight.
  A failed probe opens it again for twice as long (1, 2, 4, 8, then 16 s at most: a dead
  region costs a failover every 16 s, and a recovered upstream waits at most that long for
  its traffic back).
- **closed** (healthy) again at the first success.

A steward knows nothing of the others; the fleet (``fleet``) routes among them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
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

# How long an upstream counts as unhealthy after a failure of its own; doubled per failed
# probe, up to the maximum (module doc). One second is about a 529 storm's shortest breath.
UNHEALTHY_BASE_S: Final = 1.0
UNHEALTHY_MAX_S: Final = 16.0
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
        self._probing = False  # a half-open probe is under way

    @property
    def in_flight(self) -> int:
        """Calls holding a slot here now (a stream until its end)."""
        return self._in_flight

    @property
    def healthy(self) -> bool:
        """Closed, or half-open with no probe under way (module doc)."""
        return self._clock() >= self._unhealthy_until and not self._probing

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
        self._in_flight += 1  # the local room is taken: the router sees it at once
        try:
            if shared is not None and holder is not None:
                await shared.acquire(holder, model_id)
            yield
        finally:
            self._in_flight -= 1
            if shared is not None and holder is not None:
                with trio.CancelScope(shield=True):
                    await shared.release(holder)  # idempotent: also after a half-done acquire
            if limiter is not None:
                limiter.release_on_behalf_of(token)

    @contextmanager
    def attempting(self) -> Iterator[None]:
        """Around one attempt here: the attempt made when the pause is over is the
        half-open probe, until it succeeds, fails or is given up (cancelled)."""
        probe = self._strikes > 0 and not self._probing and self.healthy
        if probe:
            self._probing = True
        try:
            yield
        finally:
            if probe:
                self._probing = False

    def failed(self, failure: Failure) -> None:
        """An attempt here failed: a failure of the upstream's own opens the breaker, or
        (a probe's) opens it again for twice as long; the failures of calls that were
        under way when it opened are the same incident."""
        if failure.signal not in _ITS_OWN:
            return
        now = self._clock()
        if now < self._unhealthy_until:
            return  # already open for this incident
        self._strikes += 1
        pause = min(UNHEALTHY_MAX_S, UNHEALTHY_BASE_S * 2.0 ** (self._strikes - 1))
        self._unhealthy_until = now + pause

    def succeeded(self) -> None:
        """An attempt here succeeded: healthy again at once."""
        self._strikes = 0
        self._unhealthy_until = -float("inf")
