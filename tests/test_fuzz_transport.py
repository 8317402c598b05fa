"""Fuzzing how bodies arrive: chunked, cut short, abandoned, mis-framed; over raw sockets.

A chunked body, however it is split (chunk extensions and trailers included), is judged
exactly as the same bytes sent with a ``Content-Length``. A body that never arrives whole
-- a ``Content-Length`` larger than what is sent, a chunked body without its last chunk,
the client leaving mid-body, with or without a half-close first -- is never answered by an
upstream call, is accounted for once in ``/metrics``, and leaves the gateway serving.
Framing that HTTP/1.1 itself refuses (a bad chunk size) is hypercorn's to answer: its bare
400, never a 5xx, never an upstream call.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Final

import trio
from fuzz_support import (
    CHAT,
    COUNT_TOKENS,
    MESSAGES,
    Compact,
    Gateway,
    anthropic_gateway_refuses,
    check_answer,
    exchange_from_raw,
    explore,
    gateway,
    model_not_served,
    openai_gateway_refuses,
    parse_like_the_gateway,
    parse_raw,
)
from hypothesis import strategies as st

BODIES: Final = {
    CHAT: [
        {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello"}]},
        {
            "model": "claude-haiku-4-5",
            "stream": True,
            "messages": [{"role": "user", "content": "Stream, please"}],
        },
        {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x" * 3000}]},
    ],
    MESSAGES: [
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "Hello"}],
        },
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 20,
            "stream": True,
            "messages": [{"role": "user", "content": "Hi"}],
        },
    ],
    COUNT_TOKENS: [
        {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello"}]}
    ],
}
MODES: Final = (
    "chunked",  # complete: judged as the same bytes with a Content-Length
    "chunked",
    "length_short_then_close",  # declared more than sent, then the client leaves
    "length_short_then_eof",  # ... after a half-close
    "chunked_cut_then_close",  # no last chunk
    "chunked_cut_then_eof",
    "bad_chunk_size",  # not HTTP: hypercorn's 400
    "length_smaller",  # declared less than sent: the body is the declared prefix
)


@dataclass(frozen=True, repr=False)
class Case(Compact):
    door: str
    body: bytes
    mode: str
    cuts: tuple[int, ...]  # where the body is split into chunks, or cut short
    extension: bool  # chunk extensions and a trailer


@st.composite
def cases(draw: st.DrawFn) -> Case:
    door = draw(st.sampled_from(sorted(BODIES)))
    body = json.dumps(draw(st.sampled_from(BODIES[door]))).encode()
    if draw(st.integers(0, 3)) == 0:  # sometimes not a valid body at all
        body = draw(st.sampled_from([b"{", b"[]", b"\xff\xfe", b"", body[:-1]]))
    cuts = tuple(
        sorted(set(draw(st.lists(st.integers(0, max(len(body) - 1, 0)), min_size=1, max_size=6))))
    )
    return Case(door, body, draw(st.sampled_from(MODES)), cuts, draw(st.booleans()))


def _head(door: str, framing: bytes) -> bytes:
    return (
        f"POST {door} HTTP/1.1\r\nhost: 127.0.0.1\r\n".encode()
        + b"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
        + framing
        + b"\r\n"
    )


def _chunked(body: bytes, cuts: tuple[int, ...], extension: bool, last: bool = True) -> bytes:
    bounds = [0, *(c for c in cuts if 0 < c < len(body)), len(body)]
    out = b""
    for start, stop in itertools.pairwise(bounds):
        piece = body[start:stop]
        if piece:
            ext = b";name=value" if extension else b""
            out += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
    if last:
        out += b"0\r\n" + (b"x-trailer: 1\r\n" if extension else b"") + b"\r\n"
    return out


def _verdict(door: str, body: bytes) -> tuple[bool | None, bool]:
    parses, value = parse_like_the_gateway(body)
    if not parses:
        return True, False
    stream = isinstance(value, dict) and value.get("stream") is True and door != COUNT_TOKENS
    if door == CHAT:
        return openai_gateway_refuses(value), stream
    return anthropic_gateway_refuses(door, value), stream


async def _accounted_for(gw: Gateway, before: int) -> None:
    """The gateway counts the request (a 499, for a client that left) exactly once."""
    with trio.fail_after(5):
        while (total := await gw.requests_total()) == before:  # noqa: ASYNC110
            await trio.sleep(0.005)
    assert total == before + 1, (before, total)


async def test_however_a_body_arrives_it_is_judged_once_and_costs_no_call_unless_whole() -> None:
    async with gateway() as gw:

        async def check(case: Case) -> None:
            await gw.new_upstream_entries()
            before = await gw.requests_total()
            body, mode = case.body, case.mode
            cut = case.cuts[0]
            if mode == "chunked":
                data = _head(case.door, b"transfer-encoding: chunked\r\n")
                data += _chunked(body, case.cuts, case.extension)
                answer = parse_raw(await gw.raw(data))
            elif mode == "length_smaller":
                data = _head(case.door, b"content-length: %d\r\n" % cut) + body
                body = body[:cut]
                answer = parse_raw(await gw.raw(data))
            elif mode == "bad_chunk_size":
                data = _head(case.door, b"transfer-encoding: chunked\r\n") + b"zz\r\n" + body
                answer = parse_raw(await gw.raw(data, then="eof"))
                assert answer.status == 400 and answer.body == b"", answer
                await _accounted_for(gw, before)
                assert not await gw.new_upstream_entries()
                return
            else:
                if mode.startswith("length_short"):
                    framing = b"content-length: %d\r\n" % (len(body) + 1)
                    data = _head(case.door, framing) + body[:cut]
                else:
                    framing = b"transfer-encoding: chunked\r\n"
                    data = _head(case.door, framing) + _chunked(body, case.cuts, False, last=False)
                then = "close" if mode.endswith("close") else "eof"
                answer = parse_raw(await gw.raw(data, then=then))
                # Nothing to answer, or hypercorn's bare 400 for a message cut short.
                assert answer.status in (None, 400) and answer.body == b"", answer
                await _accounted_for(gw, before)
                assert not await gw.new_upstream_entries(), "an upstream call for half a body"
                return
            ex = exchange_from_raw("POST", case.door, answer, await gw.new_upstream_entries())
            refused, stream = _verdict(case.door, body)
            check_answer(
                ex, refused=refused, stream=stream, openai_upstream_may_refuse=model_not_served
            )
            assert await gw.requests_total() == before + 1

        await explore(cases(), check, max_examples=150)
        # Still serving, and every request above was accounted for.
        assert (await gw.http.get(f"{gw.url}/health")).status_code == 200


async def test_count_tokens_stays_outside_the_request_totals_however_it_ends() -> None:
    async with gateway() as gw:
        headers = [(b"anthropic-version", b"2023-06-01")]
        ok = json.dumps(BODIES[COUNT_TOKENS][0]).encode()
        assert (await gw.exchange("POST", COUNT_TOKENS, ok, headers)).status == 200
        assert (await gw.exchange("POST", COUNT_TOKENS, b"{", headers)).status == 400
        before = await gw.requests_total()
        await gw.raw(_head(COUNT_TOKENS, b"content-length: 100\r\n") + b"{", then="close")
        await _accounted_for(gw, before)
        metrics = (await gw.http.get(f"{gw.url}/metrics", headers=gw.auth)).json()
    assert metrics["by_surface"]["anthropic.count_tokens"]["requests"]["total"] == 3
    assert metrics["requests"]["total"] == 0, metrics["requests"]
