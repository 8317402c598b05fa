"""The admission gate (backpressure): bounded slots in flight, a bounded queue, fair by tenant.

Theory of operation
-------------------
State: ``_active`` slots held, and a :class:`~.fair_queue.FairQueue` of parked acquirers (at
most ``max_queue`` in all): one FIFO per tenant. An acquirer names its tenant with a
:class:`TenantShare` (name, weight, optional ``max_inflight`` and ``max_queue`` shares); one
that names none belongs to ``DEFAULT_TENANT``, so a gate nobody names a tenant to is exactly
one FIFO queue.

Invariants.

1. ``_active`` counts slots that exist and are not released -- including a slot handed to a
   waiter that has not woken up yet. So ``_active <= max_inflight`` always (when enabled), and
   likewise each tenant's ``active`` stays within its own ``max_inflight`` share.
2. A slot is never free while an *eligible* waiter waits -- one whose tenant is below its
   ``max_inflight`` share. ``release()`` hands the slot straight to the next eligible waiter in
   fair order (``_active`` unchanged) and only frees it when there is none. A newcomer takes a
   free slot at once only if its own tenant has no waiters and is below its share; so it never
   overtakes a waiter of its own tenant, and (by this invariant) never one of another tenant
   who could have had the slot. Otherwise it queues.
3. Every slot is released exactly once (``Slot.release`` is idempotent) and that release is
   the only way ``_active`` goes down.
4. A queued waiter holds no slot: a hand-off takes the waiter out of the queue as it gives it
   the slot, so shedding from the queue (below) can never take back a slot it was handed.

Fair order: self-clocked fair queuing (SCFQ, Golestani 1994), counted in admissions. The gate
keeps a virtual time ``V``. Each tenant with eligible waiters has a tag for its oldest waiter:
``V + 1/weight`` when the tenant becomes eligible (its first waiter, or it drops below its
``max_inflight`` share), then the previous tag ``+ 1/weight`` after each admission while it
stays eligible. A slot goes to the smallest tag, ties to the waiter that arrived first, and
``V`` becomes that tag. So with weights 3:1 and both tenants backlogged the admissions run
A A A B A A A B ... exactly (A A B A A A B ... if B's waiters came first), and 1:1
alternates. A tenant that idled, or sat at its own share, re-enters at the current ``V``: it
banks no credit and gets no burst. What a client can rely on: over any stretch in which
tenants ``i`` and ``j`` both have eligible waiters, their admissions ``n`` satisfy
``|n_i / w_i - n_j / w_j| <= 1 / w_i + 1 / w_j``; and a waiter whose tenant had no waiters
is admitted after at most ``floor(w_j / w_i) + 1`` admissions of each other tenant ``j`` (two
for equal weights: ``j``'s head, and ``j``'s next if it ties and arrived first). Fairness is
in admissions, not slot-seconds: a tenant whose requests run long holds its slots longer,
which its ``max_inflight`` share bounds. Immediate grants (nobody of the tenant waiting, a
slot free) do not touch ``V``: the order only exists while the gate queues.

Why not deficit round robin: DRR is O(1) per admission only when every quantum is at least one
request. With a weight below one, a tenant needs several rounds to earn one admission, so a
hand-off may sweep the round many times; scaling all quanta up to avoid that makes the bursts
as long as the largest weight. SCFQ costs O(log n) in the tenants with waiters for any
weights, its order is fixed by one tag per tenant, and ``V`` is kept in integer ticks
(``fair_queue.VIRTUAL_UNIT``), so equal shares tie exactly and the order never drifts with
floating-point rounding.

Shares. A tenant at its ``max_inflight`` share is not eligible: its waiters wait while freed
slots go to other tenants, and its own next release re-admits it. A tenant whose own queue is
at its ``max_queue`` share is shed with ``"tenant_queue_full"`` (checked first: it touches no
one else).

A full queue: longest queue drop. When ``max_queue`` waiters already wait, count the newcomer
into its tenant's queue: the queue longest in weighted terms (``waiting / weight``, so a tenant
of weight 3 may hold three times the queue of one of weight 1) loses its newest waiter. If that
is the newcomer's own (ties included) the newcomer is shed with ``"queue_full"`` at the door,
as a gate with one tenant always does. Otherwise the gate wakes that newest waiter with
``Shed("queue_full")`` naming its tenant (as ``close()`` wakes waiters) and queues the newcomer
in its place. So a flood cannot shed a quiet tenant: a newcomer whose tenant's queue, with it,
is shorter than some other tenant's is never shed for a full queue; the flooding tenant absorbs
the shedding. Why its newest: that tenant holds more than its fair share of the queue, and its
newest waiter has waited least and would be admitted last of its tenant, so the shed wastes the
least and the order stays FIFO (older waiters keep their places, the tenant its tag). Ties go
to the newcomer so an exchange never leaves its queue longer than the one it took from: two
floods do not push each other out in turn. Shed reasons, then: ``"tenant_queue_full"`` (own
``max_queue``, at the door); ``"queue_full"`` (the gate's queue is full and the tenant's is the
longest: at the door, or while waiting -- a push-out, counted in ``pushed_out``);
``"queue_timeout"``; ``"shutdown"``.

Priority lanes (``lanes``). An acquirer that says it is ``deferrable`` (a background
response, a flex request falling back to realtime) queues in the deferrable lane; everyone
else in the interactive lane. Each lane is fair between tenants as above (its own virtual
time); a tenant's ``max_inflight`` and ``max_queue`` shares count both lanes together. When a
slot comes free and both lanes have eligible waiters, the interactive lane's waiter gets it,
except that the deferrable lane gets at least ``deferrable_share`` of such hand-offs (a
credit: with 0.2, one in five), so deferrable work is slowed, never starved. A free slot is
taken by whoever asks first, whatever its lane (invariant 2 holds across lanes: no slot is
free while anyone eligible waits). A full queue sheds deferrable waiters first: an
interactive newcomer pushes out the newest waiter of the longest deferrable queue while any
deferrable waiter waits (the flood rule above then applies among deferrable queues); a
deferrable newcomer never pushes out an interactive waiter -- it competes only with other
deferrable queues, and is shed at the door when there are none to push out. With nobody
deferrable, or ``LanePolicy(enabled=False)``, the gate is exactly the one-lane gate above.

Decisions are synchronous: ``acquire()`` sheds, or pushes a waiter out and queues, before its
first checkpoint, so a shed costs no scheduling round-trip (a caller already cancelled leaves
with ``Cancelled`` instead of pushing anyone out). The uncontended path (a slot free,
no waiter of one's own tenant) is a dict lookup and an identity check more than a plain
counter, when a caller passes the same ``TenantShare`` object for a tenant each time (an equal
but new one costs a comparison). The gate keeps each tenant name's state for its lifetime: the
caller bounds the names.

Ownership. The gate owns no tasks. A ``Slot`` carries no task identity: the handler that
acquired it may pass it to the streaming response generator, which releases it.

Cancellation. A waiter that is cancelled (or times out) removes itself from its tenant's queue
(the tenant's next waiter keeps the tag). The race: ``release()`` may hand a slot to a waiter
in the same tick in which that waiter was cancelled -- trio has already scheduled it to resume
with ``Cancelled`` but it is still queued. The waiter then finds the slot in ``waiter.slot``
when it resumes: on an outer cancellation it releases it (handing it on in fair order, or
freeing it) before re-raising; on its own ``acquire_timeout`` it keeps it, since it was
admitted in time. A waiter may likewise be pushed out in the tick in which it is cancelled:
if the cancellation came first, it resumes with ``Cancelled`` (the gate counts no shed for it;
it could not tell the waiter was leaving anyway); if the push-out came first, it resumes with
its ``Shed`` before any checkpoint. It holds no slot either way (invariant 4). ``close()``
wakes every waiter with ``Shed("shutdown")``; slots already held stay held until released, and
``wait_idle()`` returns when the last one is.
"""

from __future__ import annotations

import math
from types import MappingProxyType, TracebackType
from typing import final

import trio

from ._gate_statistics import GateStatistics, LaneStatistics, TenantStatistics
from .fair_queue import DEFAULT_TENANT, SHED_REASONS, FairQueue, ShedReason, Tenant, TenantShare
from .lanes import DEFAULT_LANES, LANES, LanePolicy

__all__ = [
    "DEFAULT_TENANT",
    "AdmissionGate",
    "GateStatistics",
    "LanePolicy",
    "LaneStatistics",
    "Shed",
    "ShedReason",
    "Slot",
    "TenantShare",
    "TenantStatistics",
]

_BASE_REASONS: tuple[ShedReason, ...] = ("queue_full", "queue_timeout", "shutdown")


@final
class Shed(Exception):
    """The gate refused a request; the HTTP layer answers 429 or 503 with ``Retry-After``.

    Attributes:
      reason: ``"queue_full"``, ``"tenant_queue_full"``, ``"queue_timeout"`` or ``"shutdown"``
        (what each means: the module's docstring).
      retry_after: suggested seconds before a retry.
      tenant: the name of the acquirer's tenant, ``None`` when it named none.
    """

    def __init__(self, reason: ShedReason, retry_after: float, tenant: str | None = None) -> None:
        super().__init__(f"request shed: {reason}")
        self.reason: ShedReason = reason
        self.retry_after = retry_after
        self.tenant = tenant


@final
class Slot:
    """The right to be in flight. Release it exactly when the reply is completely sent.

    ``release()`` is idempotent and may be called from any task. A ``Slot`` is also a
    context manager that releases on exit.
    """

    __slots__ = ("_gate", "_tenant")

    def __init__(self, gate: AdmissionGate, tenant: Tenant[_Waiter]) -> None:
        self._gate: AdmissionGate | None = gate
        self._tenant = tenant

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate._release(self._tenant)

    @property
    def released(self) -> bool:
        return self._gate is None

    @property
    def tenant(self) -> str:
        """The name of the tenant the slot counts against."""
        return self._tenant.name

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


@final
class _Waiter:
    __slots__ = ("lane", "shed", "slot", "woken")

    def __init__(self, lane: int) -> None:
        self.lane = lane  # 0 interactive, 1 deferrable
        self.woken = trio.Event()
        self.slot: Slot | None = None  # set by release(): the hand-off
        self.shed: ShedReason | None = None  # set by close() and by a push-out


@final
class AdmissionGate:
    """Admit up to ``max_inflight`` requests; queue up to ``max_queue`` more, fair by tenant.

    Args:
      max_inflight: slots; 0 disables the gate (always admits, tenants' shares included;
        still counts ``active``).
      max_queue: waiters allowed at once, all tenants together; beyond that the newest
        waiter of the longest queue (the acquirer's own, with one tenant) is shed at once.
      acquire_timeout: seconds a waiter waits before ``Shed("queue_timeout")`` (may be
        ``math.inf``): a safety net so a queued request cannot outwait its client.
      retry_after: the ``retry_after`` every ``Shed`` carries.
      lanes: the priority lanes' policy (``lanes``): whether an acquirer that says it is
        ``deferrable`` queues in the deferrable lane, and that lane's share. By default on.
    """

    def __init__(
        self,
        max_inflight: int,
        max_queue: int,
        acquire_timeout: float,
        *,
        retry_after: float = 1.0,
        lanes: LanePolicy = DEFAULT_LANES,
    ) -> None:
        if max_inflight < 0 or max_queue < 0:
            raise ValueError("max_inflight and max_queue must be >= 0")
        if not acquire_timeout >= 0:
            raise ValueError(f"acquire_timeout must be >= 0, not {acquire_timeout}")
        self._max_inflight = max_inflight
        self._max_queue = max_queue
        self._acquire_timeout = acquire_timeout
        self._retry_after = retry_after
        self._active = 0
        self._lanes = lanes
        self._queue: FairQueue[_Waiter] = FairQueue(lanes.deferrable_share)
        self._lane_admitted = [0, 0]  # by lane: 0 interactive, 1 deferrable
        self._lane_shed = [0, 0]
        self._states = self._queue.tenants
        self._default = self._queue.tenant(DEFAULT_TENANT)
        self._named = False  # has any acquirer named a tenant?
        self._closed = False
        self._shed: dict[ShedReason, int] = dict.fromkeys(SHED_REASONS, 0)
        self._idle = trio.lowlevel.ParkingLot()

    @property
    def lanes(self) -> LanePolicy:
        return self._lanes

    def acquire_nowait(
        self, *, tenant: TenantShare | None = None, deferrable: bool = False
    ) -> Slot:
        """Take a free slot, never waiting.

        Args:
          tenant: who is asking; ``None`` for ``DEFAULT_TENANT``.
          deferrable: counted in the deferrable lane (lanes on).

        Raises:
          Shed: ``"shutdown"`` once closed; ``"tenant_queue_full"`` when the tenant is at its
            own ``max_inflight`` share; ``"queue_full"`` when no slot is free for it now.
        """
        state = self._default if tenant is None else self._tenant(tenant)
        lane = 1 if deferrable and self._lanes.enabled else 0
        if self._closed:
            raise self._shed_now("shutdown", state, lane)
        if self._max_inflight == 0 or (
            self._active < self._max_inflight
            and not state.waiting
            and (state.limit is None or state.active < state.limit)
        ):
            return self._grant(state, lane)
        raise self._shed_now("tenant_queue_full" if state.capped else "queue_full", state, lane)

    async def acquire(
        self,
        deadline: float = math.inf,
        *,
        tenant: TenantShare | None = None,
        deferrable: bool = False,
    ) -> Slot:
        """Take a slot, waiting in the tenant's queue for up to ``acquire_timeout`` if need
        be, and never past ``deadline`` (the request's own, ``trio.current_time()`` scale).

        Args:
          deadline: when to give up waiting, at the latest.
          tenant: who is asking; ``None`` for ``DEFAULT_TENANT``.
          deferrable: the request can wait: with lanes on it queues in the deferrable
            lane, admitted after interactive waiters but for its lane's share, and shed
            first when the queue is full.

        Raises:
          Shed: ``"shutdown"`` (closed, before or while waiting), ``"tenant_queue_full"``
            (no slot for the tenant and its own ``max_queue`` share already waiting),
            ``"queue_full"`` (no slot, ``max_queue`` already waiting and the tenant's queue
            the longest) -- both raised before any checkpoint; ``"queue_full"`` too when
            pushed out while waiting by another tenant's newcomer -- or ``"queue_timeout"``.
        """
        state = self._default if tenant is None else self._tenant(tenant)
        lane = 1 if deferrable and self._lanes.enabled else 0
        if self._closed:
            raise self._shed_now("shutdown", state, lane)
        if self._max_inflight == 0 or (
            self._active < self._max_inflight
            and not state.waiting
            and (state.limit is None or state.active < state.limit)
        ):
            await trio.lowlevel.checkpoint_if_cancelled()
            slot = self._grant(state, lane)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return slot
        if state.queue_full:
            raise self._shed_now("tenant_queue_full", state, lane)
        queue = self._queue
        if queue.waiting >= self._max_queue:
            victim = queue.longest(state, lane == 1)
            if victim is None:
                raise self._shed_now("queue_full", state, lane)
            await trio.lowlevel.checkpoint_if_cancelled()  # a no-op unless we have left
            pushed = queue.pop_newest(*victim)
            pushed.shed = "queue_full"
            pushed.woken.set()

        waiter = _Waiter(lane)
        queue.push(state, waiter, lane == 1)
        try:
            with trio.move_on_at(min(trio.current_time() + self._acquire_timeout, deadline)):
                await waiter.woken.wait()
        except BaseException:
            queue.remove(state, waiter)
            if waiter.slot is not None:
                waiter.slot.release()  # handed over as we were cancelled: pass it on
            raise
        queue.remove(state, waiter)
        if waiter.slot is not None:
            state.admitted += 1
            self._lane_admitted[lane] += 1
            return waiter.slot
        if waiter.shed == "queue_full":
            state.pushed_out += 1
        raise self._shed_now(waiter.shed or "queue_timeout", state, lane)

    def close(self) -> None:
        """Shed every waiter and every later acquirer with ``"shutdown"``. Idempotent."""
        self._closed = True
        for _, waiter in self._queue.clear():
            waiter.shed = "shutdown"
            waiter.woken.set()

    async def wait_idle(self) -> None:
        """Return once no slot is held (for the shutdown drain)."""
        if self._active == 0:
            await trio.lowlevel.checkpoint()
            return
        while self._active:
            await self._idle.park()

    def statistics(self) -> GateStatistics:
        tenants = self._queue.tenants.values()
        reasons = SHED_REASONS if self._named else _BASE_REASONS
        return GateStatistics(
            active=self._active,
            waiting=self._queue.waiting,
            max_inflight=self._max_inflight,
            max_queue=self._max_queue,
            shed_by_reason=MappingProxyType({reason: self._shed[reason] for reason in reasons}),
            admitted_total=sum(t.admitted for t in tenants),
            closed=self._closed,
            by_tenant=MappingProxyType(
                {
                    t.name: TenantStatistics(
                        active=t.active,
                        waiting=t.waiting,
                        admitted_total=t.admitted,
                        shed_by_reason=MappingProxyType(dict(t.shed)),
                        weight=t.share.weight,
                        max_inflight=t.share.max_inflight,
                        max_queue=t.share.max_queue,
                        pushed_out=t.pushed_out,
                    )
                    for t in tenants
                }
            ),
            pushed_out=sum(t.pushed_out for t in tenants),
            lanes=MappingProxyType(
                {
                    name: LaneStatistics(
                        waiting=self._queue.lane_waiting[i],
                        admitted_total=self._lane_admitted[i],
                        shed_total=self._lane_shed[i],
                    )
                    for i, name in enumerate(LANES)
                }
            ),
        )

    def _tenant(self, share: TenantShare) -> Tenant[_Waiter]:
        state = self._states.get(share.name)
        if state is None or state.share is not share:
            state = self._adopt(share)
        return state

    def _adopt(self, share: TenantShare) -> Tenant[_Waiter]:
        # A tenant seen for the first time, or bringing another share object.
        self._named = True
        queue = self._queue
        state = queue.tenant(share)
        # A new share may have made waiters eligible (a raised max_inflight): keep invariant 2.
        while queue.waiting and self._active < self._max_inflight:
            handed = queue.pop()
            if handed is None:
                break
            self._active += 1
            handed[1].slot = Slot(self, handed[0])
            handed[1].woken.set()
        return state

    def _grant(self, state: Tenant[_Waiter], lane: int) -> Slot:
        self._active += 1
        state.active += 1
        state.admitted += 1
        self._lane_admitted[lane] += 1
        return Slot(self, state)

    def _shed_now(self, reason: ShedReason, state: Tenant[_Waiter], lane: int) -> Shed:
        self._shed[reason] += 1
        self._lane_shed[lane] += 1
        state.shed[reason] += 1
        return Shed(reason, self._retry_after, None if state is self._default else state.name)

    def _release(self, state: Tenant[_Waiter]) -> None:
        queue = self._queue
        if queue.waiting:
            handed = queue.release(state)
            if handed is not None:
                handed[1].slot = Slot(self, handed[0])
                handed[1].woken.set()
                return
        else:
            state.active -= 1
        self._active -= 1
        if self._active == 0:
            self._idle.unpark_all()
