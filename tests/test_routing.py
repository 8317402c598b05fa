"""The router as data: snapshots in, the order of upstreams to try out, exact counts."""

from __future__ import annotations

import collections
from collections.abc import Sequence

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from trio_batcher.upstreams.affinity import AffinityTable
from trio_batcher.upstreams.config import (
    AnthropicAccess,
    BedrockAccess,
    UpstreamSpec,
    VertexAccess,
)
from trio_batcher.upstreams.conversation import SESSION_HEADER, conversation_key
from trio_batcher.upstreams.routing import (
    Attempt,
    Route,
    Router,
    SmoothWeighted,
    UpstreamState,
    order,
    snapshot,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _router() -> Router:
    return Router(AffinityTable(FakeClock()))


def _up(name: str, **fields: object) -> UpstreamState:
    values: dict[str, object] = {"model_id": "m", **fields}
    return UpstreamState(name, **values)  # type: ignore[arg-type]


def _names(route: Route) -> list[str]:
    return [attempt.upstream for attempt in route.attempts]


def test_the_lowest_priority_with_room_wins_and_higher_ones_take_over_when_it_is_full() -> None:
    router = _router()
    states = [_up("standby", priority=1, index=0), _up("main", priority=0, cap=2, index=1)]
    assert _names(router.route(states, None)) == ["main", "standby"]
    full = [states[0], _up("main", priority=0, cap=2, in_flight=2, index=1)]
    route = router.route(full, None)
    assert route.attempts == (
        Attempt("standby", "m", waits=False),
        Attempt("main", "m", waits=True),
    )
    # A priority is a number, any number: negative ones come first.
    assert _names(router.route([*states, _up("first", priority=-1)], None))[0] == "first"


def test_weights_3_to_1_spread_400_new_conversations_exactly_300_and_100() -> None:
    router = _router()
    states = [_up("a", weight=3, index=0), _up("b", weight=1, index=1)]
    firsts = [router.route(states, None).attempts[0].upstream for _ in range(400)]
    assert collections.Counter(firsts) == {"a": 300, "b": 100}
    # Smoothly: every window of four has three a's and one b, never a run of 300.
    assert firsts[:8] == ["a", "a", "b", "a", "a", "a", "b", "a"]
    assert all(firsts[i : i + 4].count("b") == 1 for i in range(0, 400, 4))


def test_a_conversation_keeps_its_upstream_across_turns_and_new_ones_use_both_by_weight() -> None:
    router = _router()
    states = [_up("east", index=0), _up("west", index=1)]
    served: dict[str, list[str]] = collections.defaultdict(list)
    for turn in range(4):
        for conversation in range(16):
            key = f"conversation-{conversation}"
            route = router.route(states, key)
            assert route.affine == (turn > 0)
            first = route.attempts[0].upstream
            router.served(key, first)
            served[key].append(first)
    assert all(len(set(upstreams)) == 1 for upstreams in served.values())
    assert collections.Counter(u[0] for u in served.values()) == {"east": 8, "west": 8}


def test_a_cooling_upstream_is_never_tried_and_all_cooling_is_served_but_empty() -> None:
    router = _router()
    states = [_up("a", cooling=True), _up("b", index=1)]
    assert _names(router.route(states, None)) == ["b"]
    router.served("k", "a")
    assert router.route(states, "k") == Route(
        (Attempt("b", "m", waits=False),), affine=False, served=True
    )
    assert router.route([_up("a", cooling=True)], None) == Route((), affine=False, served=True)


def test_a_full_upstream_spills_new_and_continuing_conversations_to_one_with_room() -> None:
    router = _router()
    router.served("old", "a")
    full_a = [_up("a", cap=1, in_flight=1), _up("b", cap=1, index=1)]
    for key in (None, "old"):
        route = router.route(full_a, key)
        assert route.attempts[0] == Attempt("b", "m", waits=False)
        assert not route.affine
    # A continuing conversation spills even to a higher priority rather than wait...
    higher = [_up("a", cap=1, in_flight=1), _up("b", priority=1, index=1)]
    assert _names(router.route(higher, "old")) == ["b", "a"]
    # ...and waits on its own upstream only when nothing healthy has room anywhere.
    all_full = [_up("a", cap=1, in_flight=1), _up("b", cap=1, in_flight=1, index=1, weight=5)]
    route = router.route(all_full, "old")
    assert route.affine
    assert route.attempts == (Attempt("a", "m", waits=True), Attempt("b", "m", waits=True))


def test_a_continuing_conversation_returns_to_a_lower_priority_once_it_has_room() -> None:
    router = _router()
    router.served("k", "standby")
    states = [_up("main", cap=1), _up("standby", priority=1, index=1)]
    route = router.route(states, "k")
    assert _names(route) == ["main", "standby"]
    assert not route.affine


def test_an_unhealthy_upstream_is_the_last_resort_and_affinity_leaves_it() -> None:
    router = _router()
    router.served("k", "a")
    states = [_up("a", healthy=False, weight=9), _up("b", index=1, cap=1, in_flight=1)]
    route = router.route(states, "k")
    assert route.attempts == (Attempt("b", "m", waits=True), Attempt("a", "m", waits=True))
    assert _names(router.route([_up("a", healthy=False)], "k")) == ["a"]


def test_failover_order_is_every_other_eligible_upstream_once_room_first() -> None:
    router = _router()
    states = [
        _up("p0-light", weight=1, index=0),
        _up("p0-heavy", weight=4, index=1),
        _up("p0-full", weight=9, cap=1, in_flight=1, index=2),
        _up("p1", priority=1, index=3),
        _up("p0-sick", healthy=False, index=4),
        _up("cold", cooling=True, index=5),
        _up("other-model", model_id=None, index=6),
    ]
    route = router.route(states, None)
    assert _names(route) == ["p0-heavy", "p0-light", "p1", "p0-full", "p0-sick"]
    assert [a.waits for a in route.attempts] == [False, False, False, True, True]


SPECS = (
    UpstreamSpec("anthropic", AnthropicAccess(), models={"sonnet": "claude-sonnet-4-5"}),
    UpstreamSpec(
        "bedrock", BedrockAccess("us-east-1"), models={"sonnet": "us.anthropic.sonnet-v1:0"}
    ),
    UpstreamSpec("vertex", VertexAccess("p", "us-east5"), models={"haiku": "claude-haiku@1"}),
)


def _snapshots(model: str) -> list[UpstreamState]:
    return [snapshot(spec, model, index=i) for i, spec in enumerate(SPECS)]


def test_models_are_mapped_and_clouds_serve_only_the_models_they_map() -> None:
    router = _router()
    route = router.route(_snapshots("sonnet"), None)
    assert sorted((a.upstream, a.model_id) for a in route.attempts) == [
        ("anthropic", "claude-sonnet-4-5"),
        ("bedrock", "us.anthropic.sonnet-v1:0"),
    ]
    route = router.route(_snapshots("haiku"), None)
    assert sorted((a.upstream, a.model_id) for a in route.attempts) == [
        ("anthropic", "haiku"),
        ("vertex", "claude-haiku@1"),
    ]
    assert _names(router.route(_snapshots("opus"), None)) == ["anthropic"]
    no_anthropic = _snapshots("opus")[1:]
    assert router.route(no_anthropic, None) == Route((), affine=False, served=False)


def test_snapshot_carries_the_specs_cap_weight_and_priority() -> None:
    spec = UpstreamSpec("x", AnthropicAccess(), max_concurrency=3, weight=2, priority=5)
    assert snapshot(spec, "m", index=4, in_flight=3, cooling=True, healthy=False) == UpstreamState(
        "x", "m", priority=5, weight=2, cooling=True, in_flight=3, cap=3, healthy=False, index=4
    )


states_strategy = st.lists(
    st.builds(
        UpstreamState,
        name=st.sampled_from(["a", "b", "c", "d", "e", "f"]),
        model_id=st.one_of(st.none(), st.just("m")),
        priority=st.integers(-2, 2),
        weight=st.integers(1, 5),
        cooling=st.booleans(),
        in_flight=st.integers(0, 3),
        cap=st.one_of(st.none(), st.integers(1, 3)),
        healthy=st.booleans(),
        index=st.integers(0, 9),
    ),
    max_size=6,
    unique_by=lambda s: s.name,
)


@given(
    rounds=st.lists(st.tuples(states_strategy, st.sampled_from([None, "a", "b", "zz"])), max_size=8)
)
def test_never_routes_to_an_ineligible_upstream_and_tries_each_eligible_one_once(
    rounds: Sequence[tuple[list[UpstreamState], str | None]],
) -> None:
    pick = SmoothWeighted()
    for states, affine in rounds:
        route = order(states, affine=affine, pick=pick)
        eligible = {s.name: s for s in states if s.model_id is not None and not s.cooling}
        assert sorted(_names(route)) == sorted(eligible)
        for attempt in route.attempts:
            state = eligible[attempt.upstream]
            assert attempt.model_id == state.model_id
            assert attempt.waits == (not state.healthy or not state.has_room)
        if route.attempts and any(s.healthy and s.has_room for s in eligible.values()):
            first = eligible[route.attempts[0].upstream]
            best = min(s.priority for s in eligible.values() if s.healthy and s.has_room)
            assert (first.healthy, first.has_room, first.priority) == (True, True, best)
        assert route.served == any(s.model_id is not None for s in states)


# -- the affinity table ---------------------------------------------------------------------


def test_affinity_expires_an_hour_after_the_last_turn_served() -> None:
    clock = FakeClock()
    table = AffinityTable(clock)
    table.served("k", "a")
    clock.now = 3599.0
    assert table.get("k") == "a"
    table.served("k", "a")  # another turn: another hour
    clock.now = 3599.0 + 3599.0
    assert table.get("k") == "a"
    clock.now = 3599.0 + 3600.0
    assert table.get("k") is None
    assert len(table) == 0


def test_affinity_is_bounded_dropping_the_least_recently_served() -> None:
    clock = FakeClock()
    table = AffinityTable(clock, max_entries=10_000)
    for i in range(10_000):
        table.served(f"k{i}", "a")
    table.served("k0", "b")  # k0 served again: now the most recent
    table.served("new", "a")
    assert len(table) == 10_000
    assert table.get("k1") is None
    assert table.get("k0") == "b"
    assert table.get("k2") == "a"


def test_expired_entries_are_dropped_as_new_ones_arrive() -> None:
    clock = FakeClock()
    table = AffinityTable(clock, ttl_s=10.0)
    for i in range(5):
        clock.now = float(i)
        table.served(f"k{i}", "a")
    clock.now = 12.5
    table.served("late", "b")
    assert len(table) == 3  # k0..k2 expired at 10, 11, 12
    table.forget_upstream("a")
    assert len(table) == 1


async def test_affinity_runs_on_trio_time_under_the_autojump_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = AffinityTable(trio.current_time, ttl_s=3600.0)
    table.served("k", "a")
    await trio.sleep(3599.5)
    assert table.get("k") == "a"
    await trio.sleep(0.5)
    assert table.get("k") is None


# -- conversation keys ----------------------------------------------------------------------

FIRST = {
    "model": "m",
    "system": "You are terse.",
    "tools": [{"name": "t", "input_schema": {"type": "object"}}],
    "messages": [{"role": "user", "content": "hi"}],
}


def test_every_turn_of_a_conversation_has_the_first_turns_key() -> None:
    later = {
        **FIRST,
        "system": [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "more"},
        ],
    }
    key = conversation_key("team", "m", FIRST)
    assert len(key) == 64
    assert conversation_key("team", "m", later) == key


def test_keys_differ_by_tenant_model_system_tools_and_first_message() -> None:
    key = conversation_key("team", "m", FIRST)
    assert conversation_key("other", "m", FIRST) != key
    assert conversation_key("team", "m2", FIRST) != key
    assert conversation_key("team", "m", {**FIRST, "system": "x"}) != key
    assert conversation_key("team", "m", {**FIRST, "tools": []}) != key
    assert (
        conversation_key("team", "m", {**FIRST, "messages": [{"role": "user", "content": "yo"}]})
        != key
    )


def test_claude_codes_session_header_is_the_key_when_sent() -> None:
    assert SESSION_HEADER == "x-claude-code-session-id"
    a = conversation_key("team", "m", FIRST, session_id="s-1")
    assert a == conversation_key("team", "m", {"messages": []}, session_id="s-1")
    assert a != conversation_key("team", "m", FIRST, session_id="s-2")
    assert a != conversation_key("team", "m", FIRST)
    assert conversation_key("team", "m", {}) == conversation_key("team", "m", {"messages": "junk"})
