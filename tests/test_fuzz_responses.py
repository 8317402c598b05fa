"""Fuzzing the Responses door, ``POST /v1/responses``, over loopback.

Bodies start as Responses requests a real client sends (every input item type, function
and namespace tools, structured output, reasoning, streams, chained turns), then are
mutated (junk in any member, deep nesting, unknown and duplicated members, NaN, lone
surrogates) and spelled in any of JSON's ways. The invariants are those of every door:
never a 5xx, an OpenAI-shaped 4xx with no upstream call for a body the gateway refuses,
and a body it translates is one the upstream (the simulator, which validates like the
real API) accepts -- answered as a ``response`` object, or a stream that ends in a
terminal event and no ``[DONE]``.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final

from fuzz_support import (
    Exchange,
    assert_openai_error,
    explore,
    gateway,
    mutated,
    parse_like_the_gateway,
    spelled,
    strict_json,
)
from hypothesis import strategies as st

RESPONSES: Final = "/v1/responses"
MODELS: Final = ("claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1", "default", "gpt-4o")
PNG: Final = (
    "data:image/png;base64,"
    + base64.b64encode(
        bytes.fromhex(
            "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
            "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
        )
    ).decode()
)
PDF: Final = (
    "data:application/pdf;base64,"
    + base64.b64encode(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n").decode()
)
WEATHER: Final = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
NAMESPACE: Final = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "description": "Start an agent.",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
            "strict": False,
        }
    ],
}
_TERMINAL: Final = ("response.completed", "response.incomplete", "response.failed")

words = st.text(min_size=1, max_size=20).filter(lambda s: s.strip() and "[[" not in s)


@st.composite
def items(draw: st.DrawFn) -> list[dict[str, Any]]:
    text = draw(words)
    user: dict[str, Any] = {"role": "user", "content": [{"type": "input_text", "text": text}]}
    if draw(st.booleans()):
        user["content"].append({"type": "input_image", "image_url": PNG, "detail": "auto"})
    if draw(st.booleans()):
        user["content"].append({"type": "input_file", "file_data": PDF, "filename": "a.pdf"})
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]})
    out.append(user)
    if draw(st.booleans()):  # an earlier tool round trip
        out += [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}],
            },
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": json.dumps({"city": text}),
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
        ]
    return out


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": draw(st.sampled_from(MODELS)),
        "input": draw(st.one_of(words, items())),
    }
    if draw(st.booleans()):
        body["stream"] = True
    if draw(st.booleans()):
        body["instructions"] = draw(words)
    if draw(st.booleans()):
        body["tools"] = draw(
            st.sampled_from(
                [
                    [WEATHER],
                    [WEATHER, NAMESPACE],
                    [{"type": "web_search", "external_web_access": False}],
                ]
            )
        )
        body["tool_choice"] = draw(st.sampled_from(["auto", "required", "none"]))
    if draw(st.booleans()):
        body["text"] = {
            "format": draw(
                st.sampled_from(
                    [
                        {"type": "text"},
                        {"type": "json_object"},
                        {
                            "type": "json_schema",
                            "name": "city",
                            "schema": {
                                "type": "object",
                                "properties": {"name": {"type": "string"}},
                                "required": ["name"],
                                "additionalProperties": False,
                            },
                            "strict": True,
                        },
                    ]
                )
            )
        }
    if draw(st.booleans()):
        body["reasoning"] = {"effort": draw(st.sampled_from(["low", "medium", "high"]))}
    if draw(st.booleans()):
        body["max_output_tokens"] = draw(st.integers(16, 4096))
    if draw(st.booleans()):
        body["store"] = draw(st.booleans())
    for name in draw(st.lists(st.sampled_from(["temperature", "top_p"]), max_size=1)):
        body[name] = draw(st.floats(0, 1))
    return body


@st.composite
def cases(draw: st.DrawFn) -> tuple[bytes, bool]:
    body = draw(bodies())
    value = draw(mutated(body)) if draw(st.integers(0, 3)) else body
    content = draw(spelled(value))
    # Whether it streams is what the body says as the gateway reads it: a mutation may spell
    # a key twice (the last one counts), which the value drawn does not show.
    _, parsed = parse_like_the_gateway(content)
    return content, isinstance(parsed, dict) and parsed.get("stream") is True


def _check(ex: Exchange, stream: bool) -> None:
    assert ex.status < 500, f"a {ex.status}: {ex}"
    calls = ex.calls
    assert len(calls) <= 1, f"more than one upstream call: {ex}"
    if not calls:
        assert 400 <= ex.status < 500, f"an answer without an upstream call: {ex}"
        error = assert_openai_error(ex.body, str(ex))
        assert error["type"] != "server_error", str(ex)
        return
    call = calls[0]
    if not call["body_truncated"]:
        strict_json(call["body"])
    upstream = call["status"]
    assert upstream is not None and upstream < 500, str(ex)
    if upstream >= 400:
        # Only a model the upstream does not serve may be refused there.
        error = assert_openai_error(ex.body, str(ex))
        assert ex.status == 404 and error["code"] == "model_not_found", str(ex)
        return
    assert ex.status == 200, str(ex)
    if stream:
        text = ex.body.decode()
        assert ex.headers["content-type"].startswith("text/event-stream"), str(ex)
        assert any(f"event: {t}" in text for t in _TERMINAL), str(ex)
        assert "[DONE]" not in text, str(ex)
        return
    reply = ex.json()
    assert reply["object"] == "response" and reply["status"] in ("completed", "incomplete"), str(ex)


async def test_responses_bodies_are_refused_at_the_door_or_translated_into_valid_ones() -> None:
    async with gateway() as gw:

        async def check(case: tuple[bytes, bool]) -> None:
            content, stream = case
            headers = [(b"content-type", b"application/json")]
            _check(await gw.exchange("POST", RESPONSES, content, headers), stream)

        await explore(cases(), check, max_examples=250)


async def test_a_chained_turn_with_junk_is_refused_without_touching_the_stored_one() -> None:
    async with gateway() as gw:
        first = await gw.exchange(
            "POST", RESPONSES, json.dumps({"model": "claude-sonnet-4-5", "input": "hi"}).encode()
        )
        assert first.status == 200, str(first)
        rid = first.json()["id"]

        async def check(junk: Any) -> None:
            body = {"model": "claude-sonnet-4-5", "previous_response_id": rid, "input": junk}
            ex = await gw.exchange("POST", RESPONSES, json.dumps(body).encode())
            _check(ex, False)

        await explore(
            st.one_of(
                st.integers(),
                st.lists(
                    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
                    max_size=3,
                ),
            ),
            check,
            max_examples=40,
        )
        again = await gw.http.get(f"{gw.url}{RESPONSES}/{rid}")
        assert again.status_code == 200 and again.json()["id"] == rid
