"""Fuzzing the Anthropic doors, ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Bodies start as Messages requests the real API would take (every content block type the
simulator checks, tools, thinking, streams), then are mutated (junk in any member, deep
nesting, unknown and duplicated members, NaN, lone surrogates, huge strings) and spelled
in any of JSON's ways. The gateway checks only what it needs (docs/compatibility.md,
"what the gateway checks"), so the oracle here is exact: a body that fails those checks is
a 400 of the gateway's own, Anthropic-shaped, with no upstream call; any other body goes
upstream, and whatever the simulator (which validates like the real API) answers comes
back as it was sent.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Final

import pytest
from fuzz_support import (
    COUNT_TOKENS,
    MESSAGES,
    VERSION,
    Compact,
    HeaderCase,
    anthropic_gateway_refuses,
    check_answer,
    explore,
    gateway,
    header_cases,
    mutated,
    parse_like_the_gateway,
    spelled,
)
from hypothesis import strategies as st

MODELS: Final = (
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    "claude-opus-4-1",
    "claude-sonnet-4-6",
    "claude-opus-5",
    "claude-3-5-haiku-latest",
    "not-a-model",
)
PNG: Final = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()
PDF: Final = base64.b64encode(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n").decode()

words = st.text(min_size=1, max_size=20).filter(lambda s: s.strip() and "[[" not in s)
cache_control = st.sampled_from([{"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}])


def _text_block(text: str, cached: dict[str, Any] | None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if cached:
        block["cache_control"] = cached
    return block


text_block = st.builds(_text_block, words, st.none() | cache_control)
image_block = st.sampled_from(
    [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
    ]
)
document_block = st.sampled_from(
    [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "notes.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "plain notes"},
        },
    ]
)
user_content = st.one_of(
    words, st.lists(st.one_of(text_block, image_block, document_block), min_size=1, max_size=3)
)
tool = st.builds(
    lambda name, desc: {
        "name": name,
        "description": desc,
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
    st.sampled_from(["get_weather", "Read", "search"]),
    words,
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Alternating turns ending with a user turn; perhaps one tool round trip."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(user_content)}]
    for _ in range(draw(st.integers(0, 2))):
        messages.append({"role": "assistant", "content": draw(words)})
        messages.append({"role": "user", "content": draw(user_content)})
    if draw(st.booleans()):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_01", "name": "search", "input": {"q": "x"}}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": draw(words)}
                ],
            }
        )
    return messages


@st.composite
def messages_requests(draw: st.DrawFn, count_tokens: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": draw(st.sampled_from(MODELS)),
        "messages": draw(conversations()),
    }
    if not count_tokens:
        body["max_tokens"] = draw(st.sampled_from([1, 16, 100, 4096]))
    if draw(st.booleans()):
        body["system"] = draw(st.one_of(words, st.lists(text_block, min_size=1, max_size=2)))
    if draw(st.booleans()):
        body["tools"] = draw(st.lists(tool, min_size=1, max_size=3, unique_by=lambda t: t["name"]))
        body["tool_choice"] = draw(st.sampled_from([{"type": "auto"}, {"type": "none"}]))
    if not count_tokens:
        if draw(st.booleans()):
            body["stream"] = draw(st.booleans())
        if draw(st.integers(0, 3)) == 0:
            body["max_tokens"] = 4096
            body["thinking"] = draw(
                st.sampled_from([{"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"}])
            )
        if draw(st.booleans()):
            body["temperature"] = draw(st.sampled_from([0, 0.5, 1]))
        if draw(st.booleans()):
            body["stop_sequences"] = draw(st.lists(words, max_size=2))
        if draw(st.booleans()):
            body["metadata"] = {"user_id": draw(words)}
    return body


@dataclass(frozen=True, repr=False)
class Case(Compact):
    path: str
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    encoding_refused: bool


@st.composite
def cases(draw: st.DrawFn, path: str, odd_headers: bool) -> Case:
    base = draw(messages_requests(count_tokens=path == COUNT_TOKENS))
    value = draw(mutated(base, max_mutations=3)) if draw(st.integers(0, 4)) else base
    body = draw(spelled(value))
    headers: tuple[tuple[bytes, bytes], ...] = ()
    refused = False
    if odd_headers:
        extra: HeaderCase = draw(header_cases())
        headers, refused = extra.headers, extra.encoding_refused
    if not any(name == b"anthropic-version" for name, _ in headers) and draw(st.integers(0, 5)):
        headers = ((b"anthropic-version", VERSION.encode()), *headers)
    return Case(path, body, headers, refused)


def expectation(case: Case) -> tuple[bool | None, bool]:
    """(refused, stream) for ``check_answer``."""
    parses, value = parse_like_the_gateway(case.body)
    if case.encoding_refused or not parses:
        return True, False
    stream = isinstance(value, dict) and value.get("stream") is True and case.path == MESSAGES
    return anthropic_gateway_refuses(case.path, value), stream


@pytest.mark.parametrize(
    ("path", "examples"), [(MESSAGES, 240), (COUNT_TOKENS, 100)], ids=["messages", "count_tokens"]
)
async def test_schema_shaped_bodies_are_checked_as_documented_and_relayed(
    path: str, examples: int
) -> None:
    async with gateway() as gw:

        async def check(case: Case) -> None:
            refused, stream = expectation(case)
            ex = await gw.exchange("POST", path, case.body, case.headers)
            check_answer(ex, refused=refused, stream=stream)

        await explore(cases(path, odd_headers=False), check, max_examples=examples)


async def test_odd_headers_never_change_the_rules() -> None:
    """Odd content types, encodings, keys, versions and betas: a refused encoding is a 415
    of ours; everything else is judged as without them (and a bad version or beta by the
    upstream, whose answer comes back as it was sent)."""
    async with gateway() as gw:

        async def check(case: Case) -> None:
            refused, stream = expectation(case)
            ex = await gw.exchange("POST", case.path, case.body, case.headers)
            check_answer(ex, refused=refused, stream=stream)
            if case.encoding_refused:
                assert ex.status == 415, str(ex)

        strategy = st.sampled_from([MESSAGES, COUNT_TOKENS]).flatmap(
            lambda path: cases(path, odd_headers=True)
        )
        await explore(strategy, check, max_examples=150)


async def test_a_nan_literal_is_refused_at_the_door() -> None:
    body = (
        b'{"model":"claude-sonnet-4-5","max_tokens":10,'
        b'"messages":[{"role":"user","content":"hi"}],"temperature":NaN}'
    )
    async with gateway() as gw:
        ex = await gw.exchange("POST", MESSAGES, body, [(b"anthropic-version", VERSION.encode())])
    assert not ex.calls, str(ex)
    assert ex.status == 400


@pytest.mark.parametrize("path", [MESSAGES, COUNT_TOKENS])
async def test_a_refused_web_origin_is_anthropic_shaped_on_the_anthropic_doors(path: str) -> None:
    body = json.dumps(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    headers = [(b"anthropic-version", VERSION.encode()), (b"origin", b"https://evil.example")]
    async with gateway() as gw:
        ex = await gw.exchange("POST", path, body, headers)
    assert ex.status == 403 and not ex.calls
    check_answer(ex, refused=True)


async def test_an_unhashable_media_type_is_a_400_from_the_simulator_not_a_crash() -> None:
    source = {"type": "base64", "media_type": [], "data": PNG}
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [{"type": "image", "source": source}]}],
    }
    async with gateway() as gw:
        ex = await gw.exchange(
            "POST", MESSAGES, json.dumps(body).encode(), [(b"anthropic-version", b"2023-06-01")]
        )
    assert ex.status == 400, str(ex)
    check_answer(ex)
