"""The Responses door with the official ``openai`` SDK (strict validation), over loopback
against the simulator: create, stream, parse, retrieve, input items, delete, and
conversations chained by ``previous_response_id`` -- across a restart too.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from pydantic import BaseModel
from support import (
    Sim,
    openai_client,
    proxy_and_simulator,
    proxy_settings,
    running_proxy,
    running_simulator,
)

MODEL = "claude-sonnet-4-5"
WEATHER: dict[str, Any] = {
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


async def _upstream_bodies(sim: Sim) -> list[dict[str, Any]]:
    return [
        json.loads(e["body"]) if isinstance(e["body"], str) else e["body"]
        for e in await sim.received()
        if e["path"] == "/v1/messages"
    ]


async def test_create_parses_strictly_is_stored_and_can_be_retrieved_listed_and_deleted() -> None:
    async with proxy_and_simulator(metrics_enabled=True) as (url, sim):
        client = openai_client(url)
        raw = await client.responses.with_raw_response.create(
            model=MODEL, input="Hello there", instructions="Answer briefly.", metadata={"k": "v"}
        )
        response = raw.parse()
        assert response.object == "response" and response.status == "completed"
        assert response.id.startswith("resp_")
        assert "Hello" in response.output_text
        assert response.instructions == "Answer briefly." and response.metadata == {"k": "v"}
        assert response.usage is not None and response.usage.input_tokens > 0
        upstream = (await _upstream_bodies(sim))[-1]
        assert (
            upstream["system"] == "Answer briefly."
            or upstream["system"][0]["text"] == "Answer briefly."
        )
        assert raw.headers["x-request-id"]

        again = await client.responses.retrieve(response.id)
        assert again.model_dump() == response.model_dump()
        items = await client.responses.input_items.list(response.id)
        assert [(i.type, getattr(i, "role", None)) for i in items.data] == [("message", "user")]
        assert items.data[0].content[0].type == "input_text"

        await client.responses.delete(response.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.delete(response.id)
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(f"{url}/metrics")).json()
    assert metrics["by_surface"]["openai.responses"]["requests"]["by_status"] == {"200": 1}


async def test_a_stream_folds_into_its_final_response_which_is_stored() -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        types: list[str] = []
        sequence: list[int] = []
        async with client.responses.stream(model=MODEL, input="Tell me a story") as stream:
            async for event in stream:
                types.append(event.type)
                sequence.append(event.sequence_number)
            final = await stream.get_final_response()
        assert types[:2] == ["response.created", "response.in_progress"]
        assert types[-1] == "response.completed"
        assert "response.output_text.delta" in types
        assert sequence == list(range(len(sequence)))
        assert final.status == "completed" and final.output_text
        stored = await client.responses.retrieve(final.id)
        assert stored.output_text == final.output_text


class Weather(BaseModel):
    city: str
    temperature_c: float


async def test_parse_returns_the_pydantic_model() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        response = await client.responses.parse(
            model=MODEL, input="The weather in Paris, as JSON.", text_format=Weather
        )
        assert isinstance(response.output_parsed, Weather)
        upstream = (await _upstream_bodies(sim))[-1]
        schema = upstream["output_config"]["format"]["schema"]  # structured output, compiled
        assert set(schema["properties"]) == {"city", "temperature_c"}


async def test_three_turns_by_previous_response_id_then_a_fourth_after_a_restart(
    tmp_path: Path,
) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path / "data"))
        async with running_proxy(settings) as url:
            client = openai_client(url)
            first = await client.responses.create(
                model=MODEL, input="What is the weather in Paris?", tools=[WEATHER]
            )
            calls = [item for item in first.output if item.type == "function_call"]
            assert [c.name for c in calls] == ["get_weather"]
            second = await client.responses.create(
                model=MODEL,
                previous_response_id=first.id,
                input=[
                    {
                        "type": "function_call_output",
                        "call_id": calls[0].call_id,
                        "output": "18C, sunny",
                    }
                ],
                tools=[WEATHER],
            )
            assert second.status == "completed" and second.output_text
            third = await client.responses.create(
                model=MODEL, previous_response_id=second.id, input="Thanks! Any umbrella?"
            )
            assert third.previous_response_id == second.id
            body = (await _upstream_bodies(sim))[-1]
            roles = [m["role"] for m in body["messages"]]
            assert roles == ["user", "assistant", "user", "assistant", "user"]
            kinds = [
                [b["type"] for b in m["content"]] if isinstance(m["content"], list) else ["text"]
                for m in body["messages"]
            ]
            assert "tool_use" in kinds[1] and kinds[2] == ["tool_result"]
            assert body["messages"][2]["content"][0]["tool_use_id"] == calls[0].call_id
            items = await client.responses.input_items.list(third.id, order="asc", limit=100)
            listed = [(i.type, getattr(i, "role", None)) for i in items.data]
            assert listed == [
                ("message", "user"),
                *[(o.type, getattr(o, "role", None)) for o in first.output],
                ("function_call_output", None),
                *[(o.type, getattr(o, "role", None)) for o in second.output],
                ("message", "user"),
            ]
            assert ("function_call", None) in listed
        async with running_proxy(settings) as url:  # a new process's worth of state
            client = openai_client(url)
            fourth = await client.responses.create(
                model=MODEL, previous_response_id=third.id, input="And tomorrow?"
            )
            assert fourth.status == "completed"
            body = (await _upstream_bodies(sim))[-1]
            assert [m["role"] for m in body["messages"]] == [
                "user",
                "assistant",
                "user",
                "assistant",
                "user",
                "assistant",
                "user",
            ]


async def test_an_unknown_or_unstored_previous_response_is_a_400_without_an_upstream_call() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        unstored = await client.responses.create(model=MODEL, input="hi", store=False)
        before = len(await _upstream_bodies(sim))
        for previous in ("resp_doesnotexist", unstored.id):
            with pytest.raises(openai.BadRequestError) as refused:
                await client.responses.create(
                    model=MODEL, input="hi", previous_response_id=previous
                )
            error = refused.value.body
            assert isinstance(error, dict)
            assert error["param"] == "previous_response_id"
            assert error["code"] == "previous_response_not_found"
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(unstored.id)
        assert len(await _upstream_bodies(sim)) == before


async def test_a_response_belongs_to_the_key_that_created_it() -> None:
    async with proxy_and_simulator(proxy_api_keys=("key-a", "key-b")) as (url, _sim):
        alice = openai_client(url, api_key="key-a")
        bob = openai_client(url, api_key="key-b")
        mine = await alice.responses.create(model=MODEL, input="hi")
        with pytest.raises(openai.NotFoundError):
            await bob.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            await bob.responses.input_items.list(mine.id)
        with pytest.raises(openai.NotFoundError):
            await bob.responses.delete(mine.id)
        with pytest.raises(openai.BadRequestError):
            await bob.responses.create(model=MODEL, input="hi", previous_response_id=mine.id)
        assert (await alice.responses.retrieve(mine.id)).id == mine.id


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": "nonsense"}]}, "input[0].type"),
        ({"input": 42}, "input"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]},
            "input[0].call_id",
        ),
        ({"input": "hi", "tools": [{"type": "code_interpreter"}]}, "tools[0].type"),
    ],
)
async def test_bad_input_is_a_400_naming_the_item_and_never_reaches_the_upstream(
    body: dict[str, Any], param: str
) -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        reply = await http.post(f"{url}/v1/responses", json={"model": MODEL, **body})
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == param
        assert await _upstream_bodies(sim) == []


async def test_input_items_page_by_cursor_in_both_orders() -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        turns = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
        response = await client.responses.create(model=MODEL, input=turns)
        page = await client.responses.input_items.list(response.id, limit=2, order="asc")
        assert page.has_more and len(page.data) == 2
        seen = [item.id for item in page.data]
        async for item in client.responses.input_items.list(response.id, limit=2, order="asc"):
            if item.id not in seen:
                seen.append(item.id)
        assert len(seen) == 5
        newest = await client.responses.input_items.list(response.id, limit=1)
        assert newest.data[0].id == seen[-1]


async def test_an_item_reference_names_a_stored_item_without_chaining_its_response() -> None:
    """The Vercel AI SDK's tool loop: the second step references the first response's
    function call by id, with no ``previous_response_id``."""
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        first = await client.responses.create(
            model=MODEL, input="What is the weather in Paris?", tools=[WEATHER]
        )
        call = next(item for item in first.output if item.type == "function_call")
        second = await client.responses.create(
            model=MODEL,
            input=[
                {"role": "user", "content": "What is the weather in Paris?"},
                {"type": "item_reference", "id": call.id},
                {"type": "function_call_output", "call_id": call.call_id, "output": "18C"},
            ],
            tools=[WEATHER],
        )
        assert second.status == "completed"
        body = (await _upstream_bodies(sim))[-1]
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
        assert body["messages"][1]["content"][-1]["id"] == call.call_id
        with pytest.raises(openai.BadRequestError) as unknown:
            await client.responses.create(
                model=MODEL, input=[{"type": "item_reference", "id": "fc_unknown"}]
            )
        assert isinstance(unknown.value.body, dict)
        assert unknown.value.body["param"] == "input[0].id"


@pytest.mark.parametrize("base", ["", "/", "/v1/", "//v1"])
async def test_base_url_spellings_reach_the_responses_routes(base: str) -> None:
    """A base URL without ``/v1``, or with a trailing slash, reaches the same routes."""
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        created = await http.post(f"{url}{base}/responses", json={"model": MODEL, "input": "hi"})
        assert created.status_code == 200, created.text
        rid = created.json()["id"]
        assert (await http.get(f"{url}{base}/responses/{rid}")).json()["id"] == rid
        listed = await http.get(f"{url}{base}/responses/{rid}/input_items")
        assert listed.json()["object"] == "list"
        assert (await http.delete(f"{url}{base}/responses/{rid}")).json()["deleted"] is True


async def test_retrieve_and_input_items_refuse_what_they_cannot_do() -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        rid = (await http.post(f"{url}/v1/responses", json={"model": MODEL, "input": "hi"})).json()[
            "id"
        ]
        for query, param in (("?stream=true", "stream"),):
            reply = await http.get(f"{url}/v1/responses/{rid}{query}")
            assert reply.status_code == 400 and reply.json()["error"]["param"] == param
        for query, param in (
            ("?limit=0", "limit"),
            ("?limit=101", "limit"),
            ("?limit=x", "limit"),
            ("?order=sideways", "order"),
            ("?after=msg_nope", "after"),
            ("?before=msg_nope", "before"),
        ):
            reply = await http.get(f"{url}/v1/responses/{rid}/input_items{query}")
            assert reply.status_code == 400, query
            assert reply.json()["error"]["param"] == param, query
        missing = await http.get(f"{url}/v1/responses/resp_nope/input_items")
        assert missing.status_code == 404
        assert set(missing.json()["error"]) == {"message", "type", "param", "code"}


async def test_input_items_before_a_cursor_and_the_default_limit() -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        turns = [{"role": "user", "content": f"turn {i}"} for i in range(25)]
        response = await client.responses.create(model=MODEL, input=turns)
        page = await client.responses.input_items.list(response.id)
        assert len(page.data) == 20 and page.has_more  # newest first by default
        ids = [
            item.id
            for item in (
                await client.responses.input_items.list(response.id, order="asc", limit=100)
            ).data
        ]
        assert [item.id for item in page.data] == ids[::-1][:20]
        async with httpx2.AsyncClient() as http:  # the SDK pages forwards only
            before = await http.get(
                f"{url}/v1/responses/{response.id}/input_items",
                params={"order": "asc", "before": ids[10], "limit": 3},
            )
        assert [item["id"] for item in before.json()["data"]] == ids[7:10]
        assert before.json()["has_more"] is True


async def test_a_conversation_with_a_deleted_turn_cannot_be_continued_or_fully_listed() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        first = await client.responses.create(model=MODEL, input="one")
        second = await client.responses.create(
            model=MODEL, previous_response_id=first.id, input="two"
        )
        third = await client.responses.create(
            model=MODEL, previous_response_id=second.id, input="three"
        )
        await client.responses.delete(second.id)
        before = len(await _upstream_bodies(sim))
        with pytest.raises(openai.BadRequestError) as broken:
            await client.responses.create(model=MODEL, previous_response_id=third.id, input="4")
        error = broken.value.body
        assert isinstance(error, dict) and error["code"] == "previous_response_not_found"
        assert second.id in error["message"]
        assert len(await _upstream_bodies(sim)) == before
        listed = await client.responses.input_items.list(third.id, order="asc")
        assert [item.content[0].text for item in listed.data] == ["three"]  # type: ignore[union-attr]


async def test_a_stream_that_fails_is_stored_as_failed() -> None:
    async with proxy_and_simulator() as (url, _sim):
        client = openai_client(url)
        async with client.responses.stream(
            model=MODEL, input="[[sim:stream_error_after=2]] a story"
        ) as stream:
            events = [event async for event in stream]
        assert events[-1].type == "response.failed"
        failed = events[-1].response
        stored = await client.responses.retrieve(failed.id)
        assert stored.status == "failed" and stored.error is not None


async def test_a_response_whose_client_left_mid_stream_is_not_stored() -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient(timeout=10) as http:
        body = {"model": MODEL, "input": "[[sim:tokens=60,tokens_per_s=20]] slow", "stream": True}
        seen = b""
        async with (
            http.stream("POST", f"{url}/v1/responses", json=body) as response,
            aclosing(response.aiter_raw()) as chunks,
        ):
            async for chunk in chunks:
                seen += chunk
                if b"response.output_text.delta" in seen:
                    break  # leave mid-stream
        created = next(line for line in seen.split(b"\n") if line.startswith(b"data:"))
        rid = json.loads(created[5:])["response"]["id"]
        missing = await http.get(f"{url}/v1/responses/{rid}")
        assert missing.status_code == 404


async def test_a_store_that_cannot_write_still_answers(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the data directory should be")
    async with proxy_and_simulator(data_dir=str(blocked)) as (url, _sim):
        client = openai_client(url)
        response = await client.responses.create(model=MODEL, input="hi")
        assert response.status == "completed" and response.output_text
        with pytest.raises(openai.InternalServerError) as unavailable:
            await client.responses.retrieve(response.id)
        assert unavailable.value.status_code == 503
        assert isinstance(unavailable.value.body, dict)
        assert unavailable.value.body["code"] == "store_unavailable"
        with pytest.raises(openai.InternalServerError):
            await client.responses.create(model=MODEL, input="hi", previous_response_id=response.id)


async def test_retrieve_shows_reasoning_blobs_only_when_included() -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        body = {"model": MODEL, "input": "Think first", "reasoning": {"effort": "high"}}
        created = (await http.post(f"{url}/v1/responses", json=body)).json()
        reasoning = [item for item in created["output"] if item["type"] == "reasoning"]
        assert reasoning and "encrypted_content" not in reasoning[0]
        rid = created["id"]
        plain = (await http.get(f"{url}/v1/responses/{rid}")).json()
        assert all(
            "encrypted_content" not in i for i in plain["output"] if i["type"] == "reasoning"
        )
        for query in (
            "include=reasoning.encrypted_content",
            "include[]=reasoning.encrypted_content",
        ):
            shown = (await http.get(f"{url}/v1/responses/{rid}?{query}")).json()
            blobs = [
                i.get("encrypted_content") for i in shown["output"] if i["type"] == "reasoning"
            ]
            assert blobs and all(isinstance(b, str) and b for b in blobs), query


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/responses/resp_x/cancel"),
        ("POST", "/v1/responses/input_tokens"),
        ("POST", "/v1/responses/compact"),
    ],
)
async def test_the_responses_routes_not_served_are_openai_shaped_404s(
    method: str, path: str
) -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        reply = await http.request(method, f"{url}{path}", json={"model": MODEL})
        assert reply.status_code in (404, 405)
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
        assert await _upstream_bodies(sim) == []
