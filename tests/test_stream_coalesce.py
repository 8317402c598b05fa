"""Deltas read together are translated as one: never a change of content, order, tool-call
arguments or usage, and never a wait for more.

As data: ``coalesce_deltas`` on hand-made runs, then the property that matters -- an
Anthropic stream cut into arbitrary groups (what one relay turn finds buffered), each group
merged and translated, reassembles in the ``openai`` SDK to exactly what the same events
translated one by one do, and to the non-streamed reply; the same for the Responses door's
terminal response. Over loopback: a fast upstream's stream through the proxy is fewer
chunks than tokens with the same text and usage, and a slow one (nothing buffered) gets
every token as its own event, each before the upstream sent the next.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import httpx2
from hypothesis import given, settings
from hypothesis import strategies as st
from support import no_collector_pauses, openai_client, proxy_and_simulator
from test_openai_conformance import SDK_STREAM_LEFTOVERS
from test_translation_responses_stream import codec_for
from test_translation_responses_stream import run as run_responses
from test_translation_stream import (
    _expected,
    _messages,
    _sdk_accumulated,
    accumulate,
    events_for,
    normalised,
)
from test_translation_stream import run as run_chat

from trio_batcher.pipeline.coalesce import coalesce_deltas
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.upstream.resilience import StreamEvent

MODEL = "claude-sonnet-4-5"


def delta(index: int, kind: str, piece: str) -> StreamEvent:
    field = {"text_delta": "text", "input_json_delta": "partial_json"}.get(kind, "thinking")
    data = {"type": "content_block_delta", "index": index, "delta": {"type": kind, field: piece}}
    return ("content_block_delta", data, json.dumps(data))


def other(name: str, **data: Any) -> StreamEvent:
    body = {"type": name, **data}
    return (name, body, json.dumps(body))


def test_a_run_of_one_blocks_text_deltas_becomes_one_delta() -> None:
    merged = coalesce_deltas([delta(0, "text_delta", p) for p in ("Hel", "lo", ", ", "world")])
    assert merged == [
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hello, world"},
            },
            "",
        )
    ]


def test_runs_end_at_another_block_another_kind_or_any_other_event() -> None:
    stop = other("content_block_stop", index=0)
    signature = other(
        "content_block_delta", index=1, delta={"type": "signature_delta", "signature": "c2ln"}
    )
    events = [
        delta(0, "text_delta", "a"),
        delta(0, "text_delta", "b"),
        stop,
        delta(1, "thinking_delta", "c"),
        delta(1, "thinking_delta", "d"),
        signature,
        delta(2, "input_json_delta", '{"x"'),
        delta(3, "input_json_delta", ": 1}"),
        delta(2, "input_json_delta", ": 2}"),
        other("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 9}),
    ]
    merged = coalesce_deltas(events)
    assert [(e[1].get("index"), e[1].get("delta")) for e in merged] == [
        (0, {"type": "text_delta", "text": "ab"}),
        (0, None),
        (1, {"type": "thinking_delta", "thinking": "cd"}),
        (1, {"type": "signature_delta", "signature": "c2ln"}),
        (2, {"type": "input_json_delta", "partial_json": '{"x"'}),
        (3, {"type": "input_json_delta", "partial_json": ": 1}"}),
        (2, {"type": "input_json_delta", "partial_json": ": 2}"}),
        (None, {"stop_reason": "end_turn"}),
    ]
    # What did not merge is passed as it was, its raw text included.
    assert merged[1] is stop and merged[3] is signature and merged[-1] is events[-1]
    assert merged[4] is events[6]


def test_a_delta_with_an_unknown_field_or_a_non_text_piece_is_left_alone() -> None:
    extra = delta(0, "text_delta", "a")
    extra[1]["delta"]["annotation"] = {"future": True}
    odd = delta(0, "text_delta", "b")
    odd[1]["delta"]["text"] = 7
    events = [delta(0, "text_delta", "x"), extra, odd, delta(0, "text_delta", "y")]
    assert coalesce_deltas(events) == events
    assert coalesce_deltas([]) == []


def _groups(events: list[StreamEvent], cuts: list[int]) -> list[list[StreamEvent]]:
    """``events`` cut before each index in ``cuts``: what successive relay turns read."""
    edges = sorted({c % (len(events) + 1) for c in cuts} | {0, len(events)})
    return [events[a:b] for a, b in itertools.pairwise(edges) if b > a]


def _coalesced(events: list[StreamEvent], cuts: list[int]) -> list[tuple[str, dict[str, Any]]]:
    return [(n, d) for group in _groups(events, cuts) for n, d, _ in coalesce_deltas(group)]


def _upstream(reply: dict[str, Any], piece: int) -> list[StreamEvent]:
    return [(n, d, json.dumps(d)) for n, d in events_for(reply, piece=piece)]


_cuts = st.lists(st.integers(0, 200), max_size=12)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(reply=_messages(), piece=st.integers(1, 6), cuts=_cuts)
def test_chat_chunks_of_merged_deltas_reassemble_to_the_same_message(
    reply: dict[str, Any], piece: int, cuts: list[int]
) -> None:
    events = _upstream(reply, piece)
    one_by_one = run_chat([(n, d) for n, d, _ in events], include_usage=True)
    merged = run_chat(_coalesced(events, cuts), include_usage=True)
    assert len(merged) <= len(one_by_one)
    got, want = accumulate(merged), accumulate(one_by_one)
    assert {**got, "message": normalised(got["message"])} == _expected(reply)
    assert got == want  # content, reasoning, tool calls with their arguments, usage, finish
    final = _sdk_accumulated(merged)
    assert final == _sdk_accumulated(one_by_one)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(reply=_messages(), piece=st.integers(1, 6), cuts=_cuts)
def test_responses_events_of_merged_deltas_end_in_the_same_response(
    reply: dict[str, Any], piece: int, cuts: list[int]
) -> None:
    events = _upstream(reply, piece)
    merged_events = [(n, d, "") for n, d in _coalesced(events, cuts)]
    one_by_one = run_responses(codec_for(), events)
    merged = run_responses(codec_for(), merged_events)
    assert [e["sequence_number"] for e in merged] == list(range(len(merged)))
    assert len(merged) <= len(one_by_one)
    assert merged[-1]["type"] == one_by_one[-1]["type"]
    assert merged[-1]["response"] == one_by_one[-1]["response"]  # output, usage, status

    def pieces(stream: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
        joined: dict[tuple[str, str], str] = {}
        for e in stream:
            if e["type"].endswith(".delta"):
                key = (e["type"], e["item_id"])
                joined[key] = joined.get(key, "") + e["delta"]
        return joined

    assert pieces(merged) == pieces(one_by_one)
    assert [e["type"] for e in merged if not e["type"].endswith(".delta")] == [
        e["type"] for e in one_by_one if not e["type"].endswith(".delta")
    ]


# -- over loopback ---------------------------------------------------------------------------

FAST_LONG = SimulatorConfig(reply_tokens=400)  # the whole reply in one write


@SDK_STREAM_LEFTOVERS
async def test_a_fast_upstreams_stream_is_fewer_chunks_with_the_same_text_and_usage() -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell the long story"}],
    }
    async with proxy_and_simulator(FAST_LONG) as (url, _sim):
        client = openai_client(url)
        whole = await client.chat.completions.create(**request)
        stream = await client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **request
        )
        chunks = [chunk async for chunk in stream]
    *content, last = chunks
    text = "".join(c.choices[0].delta.content or "" for c in content)
    assert text == whole.choices[0].message.content
    assert last.usage == whole.usage and whole.usage is not None
    assert whole.usage.completion_tokens == 400
    assert len(content) < 100  # 400 deltas read in a few network reads: a few chunks


TOKENS = 10
SLOW = SimulatorConfig(ttft_ms=200, tokens_per_s=20, reply_tokens=TOKENS)


async def test_a_responses_stream_with_nothing_buffered_sends_every_token_at_once() -> None:
    """Causal, as ``test_stream_relay`` checks the Chat door: 50 ms between upstream tokens
    leaves nothing buffered, so each token is its own ``output_text.delta`` and reaches the
    client before the upstream has sent the next one (one clock: the simulator runs here)."""
    body = {"model": MODEL, "stream": True, "input": "Relay timing, Responses"}
    with no_collector_pauses():
        async with proxy_and_simulator(SLOW) as (url, sim), httpx2.AsyncClient() as http:
            arrivals: list[float] = []
            async with http.stream("POST", f"{url}/v1/responses", json=body) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: ") and '"response.output_text.delta"' in line:
                        arrivals.append(time.monotonic())
            trace: dict[str, Any] = (await sim.stats())["recent"][-1]
        sent = trace["event_times"][1:]
        assert len(arrivals) == len(sent) == TOKENS
        assert all(got >= out for got, out in zip(arrivals, sent, strict=True))
        assert all(got < after for got, after in zip(arrivals[:-1], sent[1:], strict=True))
