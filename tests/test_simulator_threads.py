"""The simulator's message threads (``simulator/threads.py``): what a ``continue`` sees, the
API's errors, and the bound. Pure: no server."""

from __future__ import annotations

from typing import Any

import pytest

from trio_batcher.simulator import SimulatorConfig
from trio_batcher.simulator.errors import SimulatorError
from trio_batcher.simulator.state import SimulatorState
from trio_batcher.simulator.threads import ThreadStore

TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


def _create(text: str = "hi") -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8,
        "system": "Be brief.",
        "tools": TOOLS,
        "messages": [{"role": "user", "content": text}],
        "thread": {"type": "create"},
    }


def _continue(previous: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "more"}],
        "thread": {"type": "continue", "previous_message_id": previous},
        **extra,
    }


def _reply(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "content": [{"type": "text", "text": text}]}


def test_a_continue_is_the_held_conversation_with_its_fields_then_the_new_turn() -> None:
    store = ThreadStore()
    body, turn = store.resolve(_create())
    assert turn is not None and body["tools"] == TOOLS
    store.hold(turn, _reply("msg_1", "hello"))
    full, turn = store.resolve(_continue("msg_1"))
    assert turn is not None
    assert full["system"] == "Be brief." and full["tools"] == TOOLS
    assert [m["content"] for m in full["messages"]] == [
        "hi",
        [{"type": "text", "text": "hello"}],
        "more",
    ]
    store.hold(turn, _reply("msg_2", "sure"))
    assert len(store.resolve(_continue("msg_2"))[0]["messages"]) == 5


def test_the_apis_errors_for_a_continue() -> None:
    store = ThreadStore()
    _, turn = store.resolve(_create())
    assert turn is not None
    store.hold(turn, _reply("msg_1", "hello"))
    with pytest.raises(SimulatorError) as unknown:
        store.resolve(_continue("msg_unknown"))
    assert unknown.value.status == 404 and unknown.value.type == "not_found_error"
    assert unknown.value.details == {"error_code": "thread_not_found"}
    with pytest.raises(SimulatorError) as repeated:
        store.resolve(_continue("msg_1", tools=TOOLS))  # create-only: held, never re-sent
    assert repeated.value.status == 400 and "tools" in repeated.value.message
    _, turn = store.resolve(_continue("msg_1"))
    assert turn is not None
    store.hold(turn, _reply("msg_2", "sure"))
    with pytest.raises(SimulatorError) as twice:
        store.resolve(_continue("msg_1"))
    assert twice.value.details == {"error_code": "thread_already_continued"}
    with pytest.raises(SimulatorError):
        store.resolve({**_create(), "thread": {"type": "resume"}})


def test_the_store_is_bounded_and_a_reset_empties_it() -> None:
    store = ThreadStore(entries=2)
    for i in range(3):
        _, turn = store.resolve(_create(str(i)))
        assert turn is not None
        store.hold(turn, _reply(f"msg_{i}", "ok"))
    assert len(store) == 2
    with pytest.raises(SimulatorError):  # the oldest is forgotten: "not found"
        store.resolve(_continue("msg_0"))
    state = SimulatorState(SimulatorConfig())
    _, turn = state.threads.resolve(_create())
    assert turn is not None
    state.threads.hold(turn, _reply("msg_1", "ok"))
    state.reset()
    assert len(state.threads) == 0
