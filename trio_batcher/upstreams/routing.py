"""The router, pure: which upstreams a call tries, in which order, from a snapshot.

The caller (``fleet.Fleet``, for each request) takes a snapshot of each upstream for the request's
model (``snapshot``: does it serve the model and under which id, is it cooling down, its
calls in flight against its cap, is it healthy) and asks ``Router.route`` for the order to
try them in. The rules, in this order:

1. **Eligible** = serves the model (``UpstreamSpec.model_id``: an anthropic upstream passes
   unmapped names through, a cloud serves only what it maps) and is not cooling down. Only
   eligible upstreams are ever returned; none means the request cannot be routed
   (``Route.served``: False if nothing serves the model, a 400 ``model``; True if all that
   serve it are cooling down, a 503).
2. **Priority**: the lowest ``priority`` number with a *healthy upstream with room*
   (in flight < cap) is the tier the first attempt comes from; a higher number is used only
   when every lower one is full, unhealthy or ineligible.
3. **Affinity**: within that tier, a continuing conversation (its key is in the
   ``AffinityTable``) goes back to the upstream that served it while that one is healthy and
   has room, so its prompt cache is hit.
4. **Weight**: otherwise (a new conversation, or its upstream full, unhealthy, or in another
   tier) the tier's healthy upstreams with room are chosen among by smooth weighted
   round-robin (nginx's: deterministic, exact over any window: weights 3 and 1 give 300 and
   100 of 400 new conversations, interleaved, never 300 in a row).
5. **Spill**: a full upstream is not waited for while another of its tier, or of a higher
   tier, has room: a new conversation spills at once, and so does a continuing one (it loses
   its cache, which costs less than queueing behind a full upstream whose slot may take a
   whole response to free; how soon a slot frees is not knowable from a snapshot, so the
   gateway does not guess at a "brief" wait: docs/upstreams.md, "Why spill at once"). Only
   when *no* eligible healthy upstream has room does the first attempt wait: on the
   conversation's own upstream if it has one, else on the lowest tier's weighted pick.
6. **Failover** after a failure before the first byte: the remaining attempts of the same
   ``Route``, in order: every other eligible upstream once, those with room first (lower
   priority first, then heavier weight, then file order), then the full ones, then the
   unhealthy ones (a last resort, e.g. while a health signal lags a recovery).

Only ``Router`` holds state (the round-robin's counters); ``order`` is a pure function of
its inputs and the pick. Recording which upstream served a conversation is the caller's
(``AffinityTable.served``), after the call succeeds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import final

from .affinity import AffinityTable
from .config import UpstreamSpec

__all__ = ["Attempt", "Route", "Router", "SmoothWeighted", "UpstreamState", "order", "snapshot"]


@final
@dataclass(frozen=True)
class UpstreamState:
    """One upstream as the router sees it for one request's model.

    ``model_id`` None: it does not serve the model. ``cap`` None: no cap of its own.
    ``index``: its position in the configuration, the last tie-break.
    """

    name: str
    model_id: str | None
    priority: int = 0
    weight: int = 1
    cooling: bool = False
    in_flight: int = 0
    cap: int | None = None
    healthy: bool = True
    index: int = 0

    @property
    def eligible(self) -> bool:
        return self.model_id is not None and not self.cooling

    @property
    def has_room(self) -> bool:
        return self.cap is None or self.in_flight < self.cap

    @property
    def rank(self) -> int:
        """0: healthy with room; 1: healthy but full; 2: unhealthy."""
        if not self.healthy:
            return 2
        return 0 if self.has_room else 1


def snapshot(
    spec: UpstreamSpec,
    model: str,
    *,
    index: int = 0,
    cooling: bool = False,
    in_flight: int = 0,
    healthy: bool = True,
) -> UpstreamState:
    """``spec``'s state for a request for ``model``, from the live facts the caller has."""
    return UpstreamState(
        name=spec.name,
        model_id=spec.model_id(model),
        priority=spec.priority,
        weight=spec.weight,
        cooling=cooling,
        in_flight=in_flight,
        cap=spec.max_concurrency,
        healthy=healthy,
        index=index,
    )


@final
@dataclass(frozen=True)
class Attempt:
    """Try ``upstream`` with ``model_id``; ``waits``: it has no room (or is unhealthy) now."""

    upstream: str
    model_id: str
    waits: bool


@final
@dataclass(frozen=True)
class Route:
    """The upstreams to try, first choice first; ``affine``: the first is the conversation's
    own upstream. ``served``: some upstream serves the model (when ``attempts`` is empty,
    True means all of them are cooling down)."""

    attempts: tuple[Attempt, ...]
    affine: bool
    served: bool


@final
class SmoothWeighted:
    """nginx's smooth weighted round-robin: each pick, every candidate's counter grows by
    its weight, the largest wins (the first listed on a tie) and gives back the candidates'
    total. Over any run of picks among the same candidates each gets exactly its share,
    spread evenly. Counters are kept by name, so a candidate missing from a pick (full,
    cooling) keeps its place."""

    def __init__(self) -> None:
        self._current: dict[str, int] = {}

    def pick(self, candidates: Sequence[UpstreamState]) -> UpstreamState:
        if not candidates:
            raise ValueError("no candidate to pick from")
        best = candidates[0]
        for state in candidates:
            self._current[state.name] = self._current.get(state.name, 0) + state.weight
            if self._current[state.name] > self._current[best.name]:
                best = state
        self._current[best.name] -= sum(state.weight for state in candidates)
        return best


def order(states: Iterable[UpstreamState], *, affine: str | None, pick: SmoothWeighted) -> Route:
    """The route for a request, by the module's rules (``pick`` advanced only when the first
    choice is made by weight)."""
    states = list(states)
    eligible = [s for s in states if s.eligible]
    served = any(s.model_id is not None for s in states)
    if not eligible:
        return Route((), affine=False, served=served)
    best_rank = min(s.rank for s in eligible)
    tier = min(s.priority for s in eligible if s.rank == best_rank)
    candidates = [s for s in eligible if s.rank == best_rank and s.priority == tier]
    own = next((s for s in eligible if s.name == affine), None)
    if own is not None and own.healthy and (own in candidates or best_rank > 0):
        # Its own upstream has room in the best tier, or nothing healthy has room anywhere
        # and waiting where the cache is beats waiting elsewhere.
        first = own
    else:
        first = pick.pick(candidates)
    rest = sorted(
        (s for s in eligible if s is not first),
        key=lambda s: (s.rank, s.priority, -s.weight, s.index),
    )
    attempts = tuple(Attempt(s.name, s.model_id or "", waits=s.rank > 0) for s in (first, *rest))
    return Route(attempts, affine=first is own, served=served)


@final
class Router:
    """The stateful face of ``order``: the affinity table and the round-robin's counters.

    One per gateway process; not thread-safe (one trio thread owns it).
    """

    def __init__(self, affinity: AffinityTable, pick: SmoothWeighted | None = None) -> None:
        self.affinity = affinity
        self._pick = pick or SmoothWeighted()

    def route(self, states: Iterable[UpstreamState], conversation: str | None) -> Route:
        """Where a request goes; ``conversation`` is its key, or None (affinity not wanted)."""
        affine = None if conversation is None else self.affinity.get(conversation)
        return order(states, affine=affine, pick=self._pick)

    def served(self, conversation: str | None, upstream: str) -> None:
        """Record that ``upstream`` answered a turn of ``conversation`` (call on success)."""
        if conversation is not None:
            self.affinity.served(conversation, upstream)
