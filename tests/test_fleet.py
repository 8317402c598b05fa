"""The fleet's attempts, on trio's virtual clock: routing, failover, retries, cooldowns, slots.

Each upstream is a fake caller that answers from a script (a reply, or an error) after a
tenth of a virtual second, so every count and every instant is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest
import trio
import trio.testing

from trio_batcher.errors import ProxyError
from trio_batcher.upstream.client import UpstreamReply
from trio_batcher.upstream.request import UpstreamRequest
from trio_batcher.upstream.resilience import Resilience, ResilienceConfig, classify
from trio_batcher.upstreams.affinity import AffinityTable
from trio_batcher.upstreams.config import AnthropicAccess, BedrockAccess, UpstreamSpec
from trio_batcher.upstreams.fleet import Fleet
from trio_batcher.upstreams.routing import Router
from trio_batcher.upstreams.steward import Steward

MODEL = "claude-sonnet-5-5"


def overloaded(retry_after: float | None = None) -> ProxyError:
    headers = {} if retry_after is None else {"retry-after": str(retry_after)}
    return ProxyError(
        529, "Overloaded", upstream_status=529, retry_after=retry_after, headers=headers
    )


class Fake:
    """A caller answering from ``script`` (None: a reply), then replies."""

    def __init__(self, script: Sequence[ProxyError | None] = ()) -> None:
        self.script = list(script)
        self.calls: list[float] = []

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        self.calls.append(trio.current_time())
        await trio.sleep(0.1)
        answer = self.script.pop(0) if self.script else None
        if answer is not None:
            raise answer
        now = trio.current_time()
        return UpstreamReply({"content": [], "model": request.model}, {}, now, now, now)

    async def open_stream(self, request: UpstreamRequest) -> Any:
        raise NotImplementedError

    async def count_tokens(self, request: UpstreamRequest) -> UpstreamReply:
        raise NotImplementedError

    async def list_models(self) -> list[dict[str, Any]]:
        return []

    async def aclose(self) -> None:
        pass


class Events:
    def __init__(self) -> None:
        self.failovers: list[tuple[str, str, str]] = []
        self.attempts: list[tuple[str, str]] = []

    def record_attempt(self, upstream: str, outcome: str) -> None:
        self.attempts.append((upstream, outcome))

    def record_failover(self, from_upstream: str, to_upstream: str, cause: str) -> None:
        self.failovers.append((from_upstream, to_upstream, cause))

    def record_spill(self, preferred: str, to_upstream: str, cause: str) -> None:
        pass

    def record_affinity(self, kept: bool) -> None:
        pass


def fleet_of(
    fakes: Sequence[Fake], *, max_retries: int = 2, specs: Sequence[UpstreamSpec] = ()
) -> tuple[Fleet, Events]:
    events = Events()
    config = ResilienceConfig(max_retries=max_retries, budget_min_retries=100)
    stewards = [
        Steward(
            specs[i] if specs else UpstreamSpec(name=f"up{i}", access=AnthropicAccess()),
            fake,
            Resilience(config, rng=lambda: 0.5),
            index=i,
        )
        for i, fake in enumerate(fakes)
    ]
    return Fleet(stewards, Router(AffinityTable(trio.current_time)), events), events


def request(**changes: Any) -> UpstreamRequest:
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    return replace(UpstreamRequest(body, MODEL, False, "test"), **changes)


async def create(caller: Any, req: UpstreamRequest) -> UpstreamReply:
    reply: UpstreamReply = await caller.create_message(req)
    return reply


async def test_each_upstream_once_then_the_last_error_within_max_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fakes = [Fake([overloaded()]), Fake([overloaded()]), Fake([overloaded()])]
    fleet, events = fleet_of(fakes, max_retries=2)
    with pytest.raises(ProxyError) as failed:
        await fleet.call(request(), create, deadline=trio.current_time() + 60)
    assert failed.value.status == 529 and failed.value.upstream == "up2"
    assert [len(f.calls) for f in fakes] == [1, 1, 1]  # 1 + max_retries attempts
    assert events.failovers == [("up0", "up1", "overloaded"), ("up1", "up2", "overloaded")]
    # A failover does not wait for the failed upstream's backoff: 0.1 s per attempt.
    assert [f.calls[0] for f in fakes] == pytest.approx([0.0, 0.1, 0.2])


async def test_when_all_have_failed_once_the_next_round_waits_the_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fakes = [Fake([overloaded(), overloaded()]), Fake([overloaded()])]
    fleet, events = fleet_of(fakes, max_retries=3)
    served = await fleet.call(request(), create, deadline=trio.current_time() + 60)
    # up0, up1 (failover), then after the backoff up0 again (529 again) and up1 (ok).
    assert served.upstream == "up1"
    assert [len(f.calls) for f in fakes] == [2, 2]
    assert fakes[0].calls[1] >= 0.2 + 0.25  # the policy's jittered backoff (rng 0.5 x 0.5 s)
    assert ("up0", "up1", "overloaded") in events.failovers


async def test_no_failover_with_retries_off(autojump_clock: trio.testing.MockClock) -> None:
    fakes = [Fake([overloaded()]), Fake()]
    fleet, events = fleet_of(fakes, max_retries=0)
    with pytest.raises(ProxyError):
        await fleet.call(request(), create, deadline=trio.current_time() + 60)
    assert [len(f.calls) for f in fakes] == [1, 0]
    assert events.failovers == []


async def test_a_refusal_is_never_sent_to_another_upstream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    refused = ProxyError(400, "bad", upstream_status=400)
    fakes = [Fake([refused]), Fake()]
    fleet, _ = fleet_of(fakes)
    with pytest.raises(ProxyError) as failed:
        await fleet.call(request(), create, deadline=trio.current_time() + 60)
    assert failed.value.status == 400
    assert [len(f.calls) for f in fakes] == [1, 0]


async def test_cooling_upstreams_are_waited_for_within_the_deadline_and_shed_past_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fakes = [Fake([overloaded(retry_after=5)]), Fake([overloaded(retry_after=5)])]
    fleet, _ = fleet_of(fakes, max_retries=1)
    with pytest.raises(ProxyError):
        await fleet.call(request(), create, deadline=trio.current_time() + 60)
    # Both cool down for 5 s now. A request that may wait 3 s is shed at once...
    start = trio.current_time()
    assert fleet.shed_error(start + 3, MODEL) is not None
    # ...and one that may wait 60 s waits for the first to come back, then is served.
    served = await fleet.call(request(), create, deadline=start + 60)
    assert trio.current_time() - start >= 4.8
    assert served.upstream in ("up0", "up1")


async def test_open_holds_the_upstreams_slot_until_the_block_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    spec = UpstreamSpec(name="capped", access=AnthropicAccess(), max_concurrency=1)
    other = UpstreamSpec(name="other", access=AnthropicAccess())
    fleet, _ = fleet_of([Fake(), Fake()], specs=[spec, other])
    capped = fleet.steward("capped")
    async with fleet.open(request(), create, deadline=trio.current_time() + 60) as served:
        assert served.upstream == "capped"
        assert capped.in_flight == 1
        # Full now: the next request spills to the other upstream instead of waiting.
        spilled = await fleet.call(
            request(body={"model": MODEL, "messages": [{"role": "user", "content": "2"}]}),
            create,
            deadline=trio.current_time() + 60,
        )
        assert spilled.upstream == "other"
    assert capped.in_flight == 0


async def test_a_request_needing_anthropics_api_skips_the_clouds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cloud = UpstreamSpec(
        name="cloud",
        access=BedrockAccess(region="us-east-1"),
        models=MappingProxyType({MODEL: "us.anthropic.claude-sonnet-5-5-v1:0"}),
    )
    fakes = [Fake()]
    fleet, _ = fleet_of(fakes, specs=[cloud])
    only = request(anthropic_only="the Files API (a file_id source)")
    with pytest.raises(ProxyError) as refused:
        await fleet.call(only, create, deadline=trio.current_time() + 60)
    assert refused.value.status == 400 and refused.value.code == "unsupported_by_upstream"
    served = await fleet.call(request(), create, deadline=trio.current_time() + 60)
    assert served.upstream == "cloud"
    assert fakes[0].calls  # the plain request went to the cloud, under its own id


async def test_a_pinned_request_goes_only_to_its_upstream_and_waits_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A request that continues a message thread may only go where the thread is held:
    # never routed elsewhere, not even to fail over from a 529 of its own upstream.
    fakes = [Fake(), Fake([overloaded()]), Fake()]
    fleet, events = fleet_of(fakes, max_retries=2)
    for _ in range(3):
        served = await fleet.call(request(pinned="up1"), create, deadline=trio.current_time() + 60)
        assert served.upstream == "up1"
    assert [len(f.calls) for f in fakes] == [0, 4, 0]  # one 529, retried on up1 itself
    assert events.failovers == []
    with pytest.raises(ProxyError) as gone:
        await fleet.call(request(pinned="up9"), create, deadline=trio.current_time() + 60)
    assert gone.value.status == 404 and gone.value.code == "pinned_upstream_gone"
    one, _ = fleet_of([Fake()])
    assert (await one.call(request(pinned="up0"), create, deadline=60)).upstream == "up0"
    with pytest.raises(ProxyError):
        await one.call(request(pinned="other"), create, deadline=trio.current_time() + 60)


def test_the_breaker_opens_once_per_incident_probes_once_and_doubles_per_failed_probe() -> None:
    now = [0.0]
    spec = UpstreamSpec(name="up", access=AnthropicAccess())
    steward = Steward(spec, Fake(), Resilience(), clock=lambda: now[0])
    storm = classify(overloaded())
    steward.failed(storm)
    steward.failed(storm)  # a call that was under way: the same incident
    assert not steward.healthy and steward.unhealthy_until == 1.0
    now[0] = 1.0
    assert steward.healthy  # half-open: the next attempt is the probe
    with steward.attempting():
        assert not steward.healthy  # the others wait for the probe's verdict
        steward.failed(storm)
    assert steward.unhealthy_until == 1.0 + 2.0
    pauses = []
    for _ in range(6):
        now[0] = steward.unhealthy_until
        with steward.attempting():
            steward.failed(storm)
        pauses.append(steward.unhealthy_until - now[0])
    assert pauses == [4.0, 8.0, 16.0, 16.0, 16.0, 16.0]
    now[0] = steward.unhealthy_until
    with steward.attempting():
        steward.succeeded()
    assert steward.healthy
    with steward.attempting():  # closed: no probe, nothing held back
        assert steward.healthy


async def test_a_storm_without_retry_after_costs_one_probe_per_pause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Steady traffic, up0 overloaded for 10 s with no retry-after: up0 sees the calls
    already under way when it failed, then one probe after pauses of 1, 2 and 4 s (plus a
    call's tenth of a second each), and is back after the storm at the next probe; no
    request fails."""
    storm_until = 10.0

    class Storm(Fake):
        async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
            self.calls.append(trio.current_time())
            await trio.sleep(0.1)
            if trio.current_time() <= storm_until:
                raise overloaded()
            now = trio.current_time()
            return UpstreamReply({"content": [], "model": request.model}, {}, now, now, now)

    fakes = [Storm(), Fake()]
    fleet, _ = fleet_of(fakes, max_retries=2)

    async def client(n: int) -> None:
        for turn in range(300):
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"{n}/{turn}"}]}
            await fleet.call(request(body=body), create, deadline=trio.current_time() + 60)

    async with trio.open_nursery() as nursery:
        for n in range(4):
            nursery.start_soon(client, n)
    calls = fakes[0].calls
    burst = [t for t in calls if t < 0.5]
    probes = [t for t in calls if 0.5 <= t < storm_until]
    assert len(burst) <= 4, calls  # at most the calls already under way
    gaps = [b - a for a, b in zip([burst[-1], *probes], probes, strict=False)]
    assert gaps == pytest.approx([1.1, 2.1, 4.1], abs=0.15), calls
    after = [t for t in calls if t >= storm_until]
    assert after and after[0] - probes[-1] == pytest.approx(8.1, abs=0.15), calls
    assert len(after) > 100  # healthy again: it has its share of the traffic back
