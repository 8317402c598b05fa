"""The incremental SSE decoder and the encoder, as data; chunk boundaries by property."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_batcher.upstream.sse import DONE, SSEDecoder, SSEError, SSEEvent, encode_data

DECODE = [
    # (id, wire bytes, expected (event, data) pairs)
    ("one_event", b"event: ping\ndata: {}\n\n", [("ping", "{}")]),
    ("default_event_name", b"data: x\n\n", [("message", "x")]),
    ("crlf", b"event: a\r\ndata: 1\r\n\r\n", [("a", "1")]),
    ("bare_cr", b"event: a\rdata: 1\r\r", [("a", "1")]),
    ("mixed_endings", b"event: a\r\ndata: 1\n\rdata: 2\r\n\n", [("a", "1"), ("message", "2")]),
    ("multi_line_data_joined", b"data: a\ndata: b\ndata:\n\n", [("message", "a\nb\n")]),
    ("no_space_after_colon", b"data:x\n\n", [("message", "x")]),
    ("only_one_space_stripped", b"data:  x\n\n", [("message", " x")]),
    ("comment_ignored", b": keep-alive\n\ndata: x\n\n", [("message", "x")]),
    ("comment_inside_event", b"event: a\n: note\ndata: 1\n\n", [("a", "1")]),
    ("id_retry_unknown_ignored", b"id: 7\nretry: 10\nfoo: bar\ndata: x\n\n", [("message", "x")]),
    ("field_without_colon", b"data\n\n", [("message", "")]),
    ("event_without_data_not_dispatched", b"event: a\n\ndata: x\n\n", [("message", "x")]),
    ("event_name_resets", b"event: a\ndata: 1\n\ndata: 2\n\n", [("a", "1"), ("message", "2")]),
    ("bom_stripped", b"\xef\xbb\xbfdata: x\n\n", [("message", "x")]),
    ("utf8", "data: ünïcødé 😀\n\n".encode(), [("message", "ünïcødé 😀")]),
    ("incomplete_event_not_dispatched", b"data: x\n", []),
    ("blank_lines_only", b"\n\n\r\n", []),
]


@pytest.mark.parametrize(("wire", "events"), [r[1:] for r in DECODE], ids=[r[0] for r in DECODE])
def test_decode(wire: bytes, events: list[tuple[str, str]]) -> None:
    decoded = SSEDecoder().feed(wire)
    assert decoded == events
    assert all(isinstance(event, SSEEvent) for event in decoded)


def test_events_have_named_fields() -> None:
    (event,) = SSEDecoder().feed(b"event: message_stop\ndata: {}\n\n")
    assert (event.event, event.data) == ("message_stop", "{}")


def test_pending_reports_a_cut_off_event() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"event: a\ndata: 1\n")
    assert decoder.pending
    decoder.feed(b"\n")
    assert not decoder.pending


def test_cr_at_chunk_end_followed_by_lf_is_one_line_ending() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 1\r") == []
    assert decoder.feed(b"\n") == []  # the \n completes the \r: not a blank line
    assert decoder.feed(b"\r\n") == [("message", "1")]


def test_oversized_line_raises_instead_of_buffering() -> None:
    decoder = SSEDecoder(max_event_bytes=10)
    with pytest.raises(SSEError):
        decoder.feed(b"data: " + b"x" * 20)


def test_oversized_event_raises_instead_of_buffering() -> None:
    decoder = SSEDecoder(max_event_bytes=10)
    with pytest.raises(SSEError):
        decoder.feed(b"data: 123456\ndata: 123456\n")


STREAM = (
    '\ufeffevent: message_start\r\ndata: {"a": "é😀"}\r\n\r\n'
    ": ping\n\n"
    "event: content_block_delta\ndata: line1\ndata: line2\n\n"
    "data: last\r\r"
).encode()
STREAM_EVENTS = [
    ("message_start", '{"a": "é😀"}'),
    ("content_block_delta", "line1\nline2"),
    ("message", "last"),
]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_chunk_boundaries_anywhere_give_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    decoder = SSEDecoder()
    events = [e for a, b in itertools.pairwise(bounds) for e in decoder.feed(STREAM[a:b])]
    assert events == STREAM_EVENTS
    assert not decoder.pending


@pytest.mark.parametrize(
    ("obj", "wire"),
    [
        ({"a": 1}, b'data: {"a":1}\n\n'),
        ({"t": "line\nbreak"}, b'data: {"t":"line\\nbreak"}\n\n'),
        ({"t": "é"}, 'data: {"t":"é"}\n\n'.encode()),
    ],
    ids=["compact", "newline_escaped", "utf8"],
)
def test_encode_data(obj: object, wire: bytes) -> None:
    assert encode_data(obj) == wire
    ((_event, data),) = SSEDecoder().feed(wire)
    assert json.loads(data) == obj


def test_done_constant() -> None:
    assert DONE == b"data: [DONE]\n\n"
    assert SSEDecoder().feed(DONE) == [("message", "[DONE]")]
