"""The fleet: every upstream of the gateway, and one request's way to one of them.

Theory of operation
-------------------
The pipeline hands the fleet an upstream request and the call to make with it (``op``:
"create a message", "open a stream up to its first content event", "count tokens"), and
gets back the answer and the name of the upstream that gave it (``Served``). In between:

1. **Route.** Each steward (``steward.Steward``) describes itself for the request's model
   (serves it? under which id? cooling down? in flight against its cap? healthy?) and the
   router (``routing.Router``) orders them: priority, then the conversation's own upstream
   (cache affinity), then weight; full upstreams are spilled over, cooling ones skipped.
2. **Attempt** on the first upstream of the route not yet tried: take one of its slots
   (waiting only if the router found no upstream with room), and make the call through its
   own ``Resilience.attempt`` (its cooldowns, its adaptive limit, its counts).
3. **Fail over** before the first byte: a retryable failure (429 with a retry-after, 529,
   5xx, a connection that failed, a timeout) sends the next attempt to the next upstream of
   a fresh route, at once -- another upstream need not wait out this one's backoff -- if the
   retry policy allows another attempt (``UPSTREAM_MAX_RETRIES``) and the receiving
   upstream's retry budget has one (``Resilience.allow_failover``): a failover is a retry,
   counted as one. The failed upstream's own cooldown (a ``retry-after``) and health (its
   failures in a row) keep the next requests away from it until it has had time to recover.
   When every eligible upstream has failed once, the request waits the policy's backoff
   and routes afresh, as a retry of one upstream always has.
4. **Hold.** The slot is held while the caller uses the answer (``open``): for a stream,
   until its last event, so an upstream's cap counts streams as the calls they are. Once the
   answer is handed over nothing is retried: the client may already have bytes.

A request ``pinned`` to an upstream (it continues a message thread that upstream holds) is
routed among that one alone: the others are not eligible, so it waits for or fails on that
upstream rather than failing over to one that would not know the thread. An upstream the
fleet no longer has is a 404 ``pinned_upstream_gone``.

With one upstream (every gateway without ``UPSTREAMS_FILE``), there is nothing to route:
the call goes through that upstream's ``Resilience.call``, exactly as before the fleet
existed -- retries with backoff on the same upstream, cooldowns waited out.

Everything that happens is told to ``events`` (the observatory): each attempt's outcome per
upstream, failovers and spills by cause, whether a continuing conversation kept its upstream.
A traced request's attempts are each a span besides (``traced.TracedAttempts``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar, final

import trio

from ..errors import ProxyError
from ..logs import DecisionNotes, log_failover
from ..upstream.caller import MessagesCaller
from ..upstream.request import UpstreamRequest
from ..upstream.resilience import Failure, Resilience, classify
from .affinity import AffinityTable
from .config import DEFAULT_NAME, AnthropicAccess, UpstreamSpec
from .routing import Attempt, Route, Router, UpstreamState
from .steward import Steward
from .traced import TracedAttempts

__all__ = ["PINNED_UPSTREAM_GONE", "Fleet", "RoutingEvents", "Served"]

PINNED_UPSTREAM_GONE = "pinned_upstream_gone"
"""The ``code`` of the 404 for a request pinned to an upstream the fleet does not have."""

T = TypeVar("T")
Op = Callable[[MessagesCaller, UpstreamRequest], Awaitable[T]]


class AffinityShare(Protocol):
    """The cluster's affinity table (``cluster.affinity.SharedAffinity``), consulted
    when this instance's own has no entry, and told when a conversation's upstream
    changes."""

    async def recall(self, key: str) -> str | None: ...

    def remember(self, key: str, upstream: str) -> None: ...


class RoutingEvents(Protocol):
    """What the fleet tells the observatory (``observatory.metrics.MetricsRegistry``)."""

    def record_attempt(self, upstream: str, outcome: str) -> None: ...

    def record_failover(self, from_upstream: str, to_upstream: str, cause: str) -> None: ...

    def record_spill(self, preferred: str, to_upstream: str, cause: str) -> None: ...

    def record_affinity(self, kept: bool) -> None: ...


@final
class _Silent:
    def record_attempt(self, upstream: str, outcome: str) -> None:
        pass

    def record_failover(self, from_upstream: str, to_upstream: str, cause: str) -> None:
        pass

    def record_spill(self, preferred: str, to_upstream: str, cause: str) -> None:
        pass

    def record_affinity(self, kept: bool) -> None:
        pass


@final
@dataclass(frozen=True, slots=True)
class Served(Generic[T]):
    """An answer and the upstream that gave it."""

    value: T
    upstream: str


@final
class Fleet:
    """Every upstream, the router between them, and a request's attempts (module doc).

    Args:
      stewards: the upstreams, in configuration order (at least one).
      router: orders them per request; holds the affinity table.
      events: the observatory's counters (nothing by default).
      share: returns the cluster's affinity table while there is one (Redis), else None.
    """

    def __init__(
        self,
        stewards: Sequence[Steward],
        router: Router,
        events: RoutingEvents | None = None,
        share: Callable[[], AffinityShare | None] | None = None,
    ) -> None:
        if not stewards:
            raise ValueError("a fleet needs at least one upstream")
        self.stewards = tuple(stewards)
        self.router = router
        self.events: RoutingEvents = events or _Silent()
        self._share = share or (lambda: None)
        self._by_name: Mapping[str, Steward] = {s.name: s for s in self.stewards}

    @classmethod
    def of_one(
        cls, caller: MessagesCaller, resilience: Resilience, name: str = DEFAULT_NAME
    ) -> Fleet:
        """A fleet of one anthropic upstream (``caller``), as a gateway without
        ``UPSTREAMS_FILE`` has: no choice, no cap of its own, ``resilience``'s retries."""
        spec = UpstreamSpec(name=name, access=AnthropicAccess())
        return cls([Steward(spec, caller, resilience)], Router(AffinityTable(trio.current_time)))

    @property
    def routes(self) -> bool:
        """Whether there is a choice to make (more than one upstream): only then is a
        request's conversation key worth computing (``conversation.conversation_key``)."""
        return len(self.stewards) > 1

    @property
    def has_clouds(self) -> bool:
        """Whether some upstream is a bedrock or vertex one: only then is it worth looking
        for features only Anthropic's own API carries (``facts.anthropic_only``)."""
        return any(s.spec.kind != "anthropic" for s in self.stewards)

    @property
    def has_anthropic(self) -> bool:
        """Whether some upstream is Anthropic's own API: what the stateful APIs (Message
        Batches) need."""
        return any(s.spec.kind == "anthropic" for s in self.stewards)

    def steward(self, name: str) -> Steward:
        return self._by_name[name]

    async def list_models(self) -> list[dict[str, Any]]:
        """The models the fleet serves, as Anthropic's ``GET /v1/models`` items, each once:
        every anthropic upstream's own list (the names it passes through), and the names
        each upstream's ``models`` table maps (a cloud serves only those). An upstream that
        cannot list is skipped; if none can, the last error is raised."""
        listed: dict[str, dict[str, Any]] = {}
        failure: ProxyError | None = None
        for steward in self.stewards:
            if steward.spec.kind == "anthropic":
                try:
                    for item in await steward.caller.list_models():
                        listed.setdefault(str(item.get("id")), item)
                except ProxyError as exc:
                    failure = exc
            for name in steward.spec.models:
                listed.setdefault(name, {"type": "model", "id": name, "display_name": name})
        if not listed and failure is not None:
            raise failure
        return list(listed.values())

    def shed_error(
        self, deadline: float, model: str, pinned: str | None = None
    ) -> ProxyError | None:
        """The error to answer at once when every upstream that serves ``model`` (only
        ``pinned``, for a request pinned to one) is held by a cooldown that outlasts
        ``deadline`` (``Resilience.shed_error``'s, of the one that ends first); ``None``
        when some upstream may still take the request."""
        serving = [(s, s.spec.model_id(model)) for s in self.stewards if pinned in (None, s.name)]
        serving = [(s, m) for s, m in serving if m is not None]
        if not serving:
            return None  # the attempt reports it, in the door's terms
        steward, model_id = min(serving, key=lambda sm: sm[0].resilience.cooling_until(sm[1]))
        if steward.resilience.cooling_until(model_id) < deadline:
            return None
        return steward.resilience.shed_error(deadline, model_id)

    async def call(
        self,
        request: UpstreamRequest,
        op: Op[T],
        *,
        deadline: float,
        headers_of: Callable[[T], Mapping[str, str]] | None = None,
    ) -> Served[T]:
        """``op`` on the upstream the route picks, failing over before it answers; the
        slot is given back on return.

        Raises:
          ProxyError: the last attempt's error, a 400 when no upstream serves the model, a
            429/503 ``upstream_cooldown`` when every one that does is cooling down past
            ``deadline``.
        """
        async with self.open(request, op, deadline=deadline, headers_of=headers_of) as served:
            return served

    @asynccontextmanager
    async def open(
        self,
        request: UpstreamRequest,
        op: Op[T],
        *,
        deadline: float,
        headers_of: Callable[[T], Mapping[str, str]] | None = None,
    ) -> AsyncIterator[Served[T]]:
        """``call``, holding the upstream's slot until the block ends (a stream's life).

        The fleet lets go of ``request`` once the answer is in: a stream's request (for
        an agent, often its whole conversation) need not live as long as the stream.
        """
        if request.pinned is not None and request.pinned not in self._by_name:
            raise _pinned_gone(request.pinned, self.stewards)
        if len(self.stewards) == 1:
            steward = self.stewards[0]
            only = request.anthropic_only
            model_id = steward.model_id(request.model, anthropic_only=only is not None)
            if model_id is None:
                raise _not_served(request.model, self.stewards, only)
            mapped = steward.request_for(request, model_id)
            notes = request.notes
            del request
            waiting = trio.current_time()
            async with steward.slot(model_id):
                call: Callable[[], Awaitable[T]] = _attempt_of(op, steward, mapped)
                if notes is not None:  # DEBUG: each of resilience's attempts noted
                    notes.slot_wait += trio.current_time() - waiting
                    call = _noted(call, notes, steward, model_id)
                try:
                    value = await steward.resilience.call(
                        call,
                        deadline=deadline,
                        headers_of=headers_of,
                        model=model_id,
                    )
                except ProxyError as exc:
                    exc.upstream = steward.name  # the observatory counts it there
                    raise
                del mapped, call
                yield Served(value, steward.name)
            return
        async with self._attempts(request, op, deadline, headers_of) as served:
            del request
            yield served

    @asynccontextmanager
    async def _attempts(
        self,
        request: UpstreamRequest,
        op: Op[T],
        deadline: float,
        headers_of: Callable[[T], Mapping[str, str]] | None,
    ) -> AsyncIterator[Served[T]]:
        conversation = request.conversation
        model = request.model
        only = request.anthropic_only
        known = await self._recall(conversation)
        tried: set[str] = set()
        retries = 0
        last: tuple[ProxyError, Failure, str] | None = None
        stewards = [s for s in self.stewards if request.pinned in (None, s.name)]
        traced = TracedAttempts(op, request.trace) if request.trace.recording else None
        while True:
            states = [s.state(model, anthropic_only=only is not None) for s in stewards]
            affine = None if conversation is None else self.router.affinity.get(conversation)
            route = self.router.route(states, conversation)
            attempt = next((a for a in route.attempts if a.upstream not in tried), None)
            if attempt is None:
                if last is None:
                    await self._wait_for_any(route, states, model, deadline, only, request.pinned)
                else:
                    await trio.sleep_until(self._retry_at(last, retries, deadline))
                    tried.clear()
                continue
            steward = self._by_name[attempt.upstream]
            if last is not None:
                exc, failure, failed_at = last
                # ``retries`` attempts have failed: this one is retry number ``retries``.
                if not await steward.resilience.allow_failover(failure, retries - 1, deadline):
                    raise exc
                if steward.name != failed_at:  # not a retry of the same one after backoff
                    self.events.record_failover(failed_at, steward.name, failure.signal)
                log_failover(
                    door=request.surface,
                    tenant=request.tenant,
                    model=model,
                    from_upstream=failed_at,
                    to_upstream=steward.name,
                    cause=_cause(exc),
                )
            elif retries == 0:
                self._first_choice(attempt, states, affine)
            mapped = steward.request_for(request, attempt.model_id)
            notes = request.notes
            waiting = trio.current_time()
            async with steward.slot(attempt.model_id):
                call: Callable[[], Awaitable[T]] = (
                    partial(op, steward.caller, mapped)
                    if traced is None
                    else traced.bind(steward, mapped)
                )
                if notes is not None:  # DEBUG: the attempt noted
                    notes.slot_wait += trio.current_time() - waiting
                    call = _noted(call, notes, steward, attempt.model_id)
                try:
                    with steward.attempting():
                        value = await steward.resilience.attempt(
                            call,
                            deadline=deadline,
                            headers_of=headers_of,
                            model=attempt.model_id,
                            first=retries == 0,
                        )
                except ProxyError as exc:
                    failure = classify(exc)
                    steward.failed(failure)
                    self.events.record_attempt(steward.name, failure.signal)
                    exc.upstream = steward.name
                    if not failure.retryable:
                        raise
                    last = (exc, failure, steward.name)
                else:
                    del mapped, request, call
                    steward.succeeded()
                    self.events.record_attempt(steward.name, "ok")
                    self.router.served(conversation, steward.name)
                    share = self._share()
                    if conversation is not None and share is not None and known != steward.name:
                        share.remember(conversation, steward.name)
                    yield Served(value, steward.name)
                    return
            tried.add(steward.name)
            retries += 1

    async def _recall(self, conversation: str | None) -> str | None:
        """The upstream that served ``conversation`` last, here or (asked only when this
        instance does not know) on another instance; seeds the local table."""
        if conversation is None:
            return None
        known = self.router.affinity.get(conversation)
        share = self._share()
        if known is not None or share is None:
            return known
        found = await share.recall(conversation)
        if found is None or found not in self._by_name:
            return None
        self.router.served(conversation, found)
        return found

    def _retry_at(
        self, last: tuple[ProxyError, Failure, str], retries: int, deadline: float
    ) -> float:
        """Every eligible upstream failed once: when the next round may start (the retry
        policy's backoff, or the ``retry-after``), or the last error if the policy or the
        deadline says none may. The retry budget is asked where the next attempt lands."""
        exc, failure, failed_at = last
        resilience = self._by_name[failed_at].resilience
        delay = resilience.backoff(failure, retries - 1)
        if delay is None or trio.current_time() + delay >= deadline:
            raise exc
        return trio.current_time() + delay

    async def _wait_for_any(
        self,
        route: Route,
        states: Sequence[UpstreamState],
        model: str,
        deadline: float,
        only: str | None,
        pinned: str | None,
    ) -> None:
        """No upstream can take the request now: none serves the model (400), or all that
        do are cooling down: wait for the first to come back, or shed if it comes back
        too late."""
        if not route.served:
            raise _not_served(model, self.stewards, only)
        error = self.shed_error(deadline, model, pinned)
        if error is not None:
            raise error
        until = min(
            self._by_name[s.name].resilience.cooling_until(s.model_id or model)
            for s in states
            if s.model_id is not None
        )
        await trio.sleep_until(until)

    def _first_choice(
        self, attempt: Attempt, states: Sequence[UpstreamState], affine: str | None
    ) -> None:
        """Tell the observatory how the first attempt was chosen: did a continuing
        conversation keep its upstream, did the request spill to another tier."""
        by_name = {s.name: s for s in states}
        chosen = by_name[attempt.upstream]
        if affine is not None and affine in by_name:
            kept = attempt.upstream == affine
            self.events.record_affinity(kept)
            if not kept:
                self.events.record_spill(affine, attempt.upstream, _why_not(by_name[affine]))
            return
        lower = [s for s in states if s.model_id is not None and s.priority < chosen.priority]
        if lower:
            preferred = min(lower, key=lambda s: (s.priority, s.index))
            self.events.record_spill(preferred.name, attempt.upstream, _why_not(preferred))


def _noted(
    call: Callable[[], Awaitable[T]], notes: DecisionNotes, steward: Steward, model_id: str
) -> Callable[[], Awaitable[T]]:
    """``call``, noting each time it is made how it ended (``DecisionNotes.attempt``)."""

    async def noted() -> T:
        try:
            value = await call()
        except ProxyError as exc:
            notes.attempt(steward.name, steward.spec.kind, model_id, _cause(exc))
            raise
        notes.attempt(steward.name, steward.spec.kind, model_id, "ok")
        return value

    return noted


def _cause(exc: ProxyError) -> str:
    """A failed attempt's cause for the logs: the upstream's status and the failure's
    class (``529-overloaded``), or the gateway's own code for a call that never got an
    answer (``timeout``, ``connect_error``)."""
    signal = classify(exc).signal
    status = exc.upstream_status
    return signal if status is None else f"{status}-{signal}"


def _attempt_of(
    op: Op[T], steward: Steward, request: UpstreamRequest
) -> Callable[[], Awaitable[T]]:
    """One attempt of ``op`` on ``steward``: each call of it a span when ``request`` is
    traced (``traced``), else the bare call."""
    if request.trace.recording:
        return TracedAttempts(op, request.trace).bind(steward, request)
    return partial(op, steward.caller, request)


def _why_not(state: UpstreamState) -> str:
    """Why the router passed over ``state``: the spill's cause."""
    if state.cooling:
        return "cooling"
    if not state.healthy:
        return "unhealthy"
    return "full" if not state.has_room else "other"


def _pinned_gone(name: str, stewards: Sequence[Steward]) -> ProxyError:
    names = ", ".join(s.name for s in stewards)
    return ProxyError(
        404,
        f"This request continues state held by the upstream {name!r}, which is not one of "
        f"this gateway's upstreams (now: {names}).",
        type="not_found_error",
        code=PINNED_UPSTREAM_GONE,
    )


def _not_served(model: str, stewards: Sequence[Steward], only: str | None) -> ProxyError:
    names = ", ".join(s.name for s in stewards)
    if only is not None and any(s.spec.model_id(model) is not None for s in stewards):
        return ProxyError(
            400,
            f"This request uses {only}, which only Anthropic's own API carries, and no "
            f"anthropic upstream of this gateway serves the model {model!r} "
            f"(upstreams: {names}).",
            type="invalid_request_error",
            code="unsupported_by_upstream",
        )
    return ProxyError(
        400,
        f"No upstream of this gateway serves the model {model!r} (upstreams: {names}); "
        "a bedrock or vertex upstream serves only the models its models table maps.",
        type="invalid_request_error",
        param="model",
        code="model_not_found",
    )
