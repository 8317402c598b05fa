"""OpenAI's Batch API end to end: the official ``openai`` SDK against the proxy, with the
simulator's Message Batches behind it (real loopback HTTP, real time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
import trio
from openai.types import Batch
from openai.types.chat import ChatCompletion
from openai.types.responses import Response as OpenAIResponse
from support import (
    openai_client,
    proxy_and_simulator,
    proxy_settings,
    running_proxy,
    running_simulator,
)

from trio_batcher.observatory.pricing import TokenUsage, load_pricing
from trio_batcher.simulator import SimulatorConfig

MODEL = "claude-sonnet-4-5"
_FINAL = {"completed", "failed", "expired", "cancelled"}


def _line(custom_id: str, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": body,
        **extra,
    }


def _text(n: int) -> dict[str, Any]:
    return _line(
        f"text-{n}",
        {"model": MODEL, "messages": [{"role": "user", "content": f"Say hello #{n}"}]},
    )


TOOL_LINE = _line(
    "tool call/1",  # not an id Anthropic accepts: mapped and mapped back
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    },
)

SCHEMA_LINE = _line(
    "structured",
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "The weather in Paris, as JSON."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "weather",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
                    "required": ["city", "celsius"],
                    "additionalProperties": False,
                },
            },
        },
    },
)


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


async def _until_final(client: Any, batch_id: str, seen: set[str] | None = None) -> Batch:
    with trio.fail_after(30):
        while True:
            batch: Batch = await client.batches.retrieve(batch_id)
            if seen is not None:
                seen.add(batch.status)
            if batch.status in _FINAL:
                return batch
            await trio.sleep(0.05)


async def _lines_of(client: Any, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    return [json.loads(line) for line in content.content.splitlines() if line.strip()]


async def test_a_batch_of_text_tool_and_structured_lines_completes_in_input_order(
    tmp_path: Path,
) -> None:
    lines = [_text(n) for n in range(5)] + [TOOL_LINE, SCHEMA_LINE] + [_text(5)]
    async with proxy_and_simulator(
        SimulatorConfig(batch_request_s=0.01), data_dir=str(tmp_path)
    ) as (url, sim):
        client = openai_client(url)
        uploaded = await client.files.create(
            file=("input.jsonl", _jsonl(lines), "application/jsonl"), purpose="batch"
        )
        assert (uploaded.purpose, uploaded.bytes, uploaded.filename) == (
            "batch",
            len(_jsonl(lines)),
            "input.jsonl",
        )
        assert (await client.files.retrieve(uploaded.id)).id == uploaded.id
        assert (await client.files.content(uploaded.id)).content == _jsonl(lines)

        created = await client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"job": "nightly"},
        )
        assert (created.status, created.metadata) == ("validating", {"job": "nightly"})

        batch = await _until_final(client, created.id)
        assert batch.status == "completed"
        assert batch.request_counts is not None
        assert batch.request_counts.model_dump() == {"total": 8, "completed": 8, "failed": 0}
        assert batch.completed_at is not None and batch.in_progress_at is not None
        assert batch.error_file_id is None

        output = await _lines_of(client, batch.output_file_id)
        assert [line["custom_id"] for line in output] == [line["custom_id"] for line in lines]
        for sent, got in zip(lines, output, strict=True):
            assert got["error"] is None and got["response"]["status_code"] == 200
            completion = ChatCompletion.model_validate(got["response"]["body"], strict=True)
            assert completion.model == sent["body"]["model"]
        tool_reply = ChatCompletion.model_validate(output[5]["response"]["body"])
        calls = tool_reply.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "get_weather"  # type: ignore[union-attr]
        assert tool_reply.choices[0].finish_reason == "tool_calls"
        structured = ChatCompletion.model_validate(output[6]["response"]["body"])
        assert set(json.loads(structured.choices[0].message.content or "")) >= {"city"}

        # Exactly one Message Batch went upstream, with every line translated.
        received = [r for r in await sim.received() if r["path"].endswith("/messages/batches")]
        assert len(received) == 1

        listed = await client.batches.list(limit=10)
        assert [b.id for b in listed.data] == [created.id]
        files = await client.files.list(purpose="batch")
        assert [f.id for f in files.data] == [uploaded.id]
        deleted = await client.files.delete(uploaded.id)
        assert deleted.deleted
        with pytest.raises(openai.NotFoundError):
            await client.files.retrieve(uploaded.id)


async def test_a_file_with_two_bad_lines_fails_naming_both_and_sends_nothing(
    tmp_path: Path,
) -> None:
    good = _jsonl([_text(1)])
    body = good + b"{not json\n" + _jsonl([_text(2), _text(1)])  # line 4 repeats line 1's id
    async with proxy_and_simulator(data_dir=str(tmp_path)) as (url, sim):
        client = openai_client(url)
        uploaded = await client.files.create(file=("bad.jsonl", body), purpose="batch")
        created = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        batch = await _until_final(client, created.id)
        assert batch.status == "failed" and batch.failed_at is not None
        assert batch.errors is not None and batch.errors.data is not None
        assert [(e.line, e.code) for e in batch.errors.data] == [
            (2, "invalid_json"),
            (4, "duplicate_custom_id"),
        ]
        assert not [r for r in await sim.received() if "batches" in r["path"]]


async def test_cancel_mid_way_delivers_finished_lines_and_the_rest_as_cancelled(
    tmp_path: Path,
) -> None:
    lines = [_text(n) for n in range(20)]
    async with proxy_and_simulator(
        SimulatorConfig(batch_request_s=0.1), data_dir=str(tmp_path)
    ) as (url, _sim):
        client = openai_client(url)
        uploaded = await client.files.create(file=("in.jsonl", _jsonl(lines)), purpose="batch")
        created = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        with trio.fail_after(10):
            while (await client.batches.retrieve(created.id)).status != "in_progress":  # noqa: ASYNC110
                await trio.sleep(0.02)
        await trio.sleep(0.5)
        cancelling = await client.batches.cancel(created.id)
        assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
        batch = await _until_final(client, created.id)
        assert batch.status == "cancelled" and batch.cancelled_at is not None
        done = await _lines_of(client, batch.output_file_id)
        rest = await _lines_of(client, batch.error_file_id)
        assert 0 < len(done) < len(lines)
        assert len(done) + len(rest) == len(lines)
        assert {line["error"]["code"] for line in rest} == {"batch_cancelled"}
        assert [ln["custom_id"] for ln in done + rest] == [ln["custom_id"] for ln in lines]
        assert batch.request_counts is not None
        assert batch.request_counts.model_dump() == {
            "total": 20,
            "completed": len(done),
            "failed": len(rest),
        }


async def test_a_batch_the_upstream_expires_is_expired_with_the_rest_as_expired(
    tmp_path: Path,
) -> None:
    lines = [_text(n) for n in range(10)]
    async with proxy_and_simulator(
        SimulatorConfig(batch_request_s=0.1, batch_expiry_s=0.45), data_dir=str(tmp_path)
    ) as (url, _sim):
        client = openai_client(url)
        uploaded = await client.files.create(file=("in.jsonl", _jsonl(lines)), purpose="batch")
        created = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        batch = await _until_final(client, created.id)
        assert batch.status == "expired" and batch.expired_at is not None
        rest = await _lines_of(client, batch.error_file_id)
        assert rest and {line["error"]["code"] for line in rest} == {"batch_expired"}
        done = await _lines_of(client, batch.output_file_id)
        assert len(done) + len(rest) == len(lines)


async def test_a_proxy_restarted_mid_batch_resumes_polling_and_delivers_every_line(
    tmp_path: Path,
) -> None:
    lines = [_text(n) for n in range(6)]
    async with running_simulator(SimulatorConfig(batch_processing_s=1.0)) as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path))
        async with running_proxy(settings) as url:
            client = openai_client(url)
            uploaded = await client.files.create(file=("in.jsonl", _jsonl(lines)), purpose="batch")
            created = await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            with trio.fail_after(10):
                while (await client.batches.retrieve(created.id)).status != "in_progress":  # noqa: ASYNC110
                    await trio.sleep(0.02)
        async with running_proxy(settings) as url:
            client = openai_client(url)
            batch = await _until_final(client, created.id)
            assert batch.status == "completed"
            output = await _lines_of(client, batch.output_file_id)
            assert [line["custom_id"] for line in output] == [ln["custom_id"] for ln in lines]
        created_upstream = [
            r for r in await sim.received() if r["path"].endswith("/messages/batches")
        ]
        assert len(created_upstream) == 1  # resumed, not sent again


async def test_another_key_sees_neither_the_files_nor_the_batches(tmp_path: Path) -> None:
    async with proxy_and_simulator(data_dir=str(tmp_path), proxy_api_keys=("key-a", "key-b")) as (
        url,
        _sim,
    ):
        alice = openai_client(url, api_key="key-a")
        bob = openai_client(url, api_key="key-b")
        uploaded = await alice.files.create(file=("in.jsonl", _jsonl([_text(1)])), purpose="batch")
        created = await alice.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        with pytest.raises(openai.NotFoundError):
            await bob.files.retrieve(uploaded.id)
        with pytest.raises(openai.NotFoundError):
            await bob.batches.retrieve(created.id)
        with pytest.raises(openai.NotFoundError):
            await bob.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
        assert (await bob.files.list()).data == []
        assert (await bob.batches.list()).data == []
        assert (await _until_final(alice, created.id)).status == "completed"


async def test_batch_usage_is_counted_under_openai_batch_at_half_the_standard_price(
    tmp_path: Path,
) -> None:
    lines = [_text(n) for n in range(3)]
    async with proxy_and_simulator(data_dir=str(tmp_path), metrics_enabled=True) as (url, _):
        client = openai_client(url)
        uploaded = await client.files.create(file=("in.jsonl", _jsonl(lines)), purpose="batch")
        created = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        batch = await _until_final(client, created.id)
        assert batch.status == "completed"
        output = await _lines_of(client, batch.output_file_id)
        async with httpx2.AsyncClient() as http:
            snapshot = (await http.get(f"{url}/metrics")).json()
    entry = snapshot["by_surface"]["openai.batch"]
    assert entry["requests"]["success"] == 3
    prompt = sum(line["response"]["body"]["usage"]["prompt_tokens"] for line in output)
    completion = sum(line["response"]["body"]["usage"]["completion_tokens"] for line in output)
    assert (entry["tokens"]["input"], entry["tokens"]["output"]) == (prompt, completion)
    price = load_pricing(None).price_for(MODEL)
    assert price is not None
    standard = price.cost(TokenUsage(input=prompt, output=completion))
    assert entry["estimated_cost_usd"] == pytest.approx(float(standard) / 2)
    # Hours of batch queueing are no sample of the realtime path's latency.
    assert {part["sample_count"] for part in entry["timing"].values()} <= {0}


async def test_a_responses_batch_answers_response_objects_and_an_errored_line_in_the_error_file(
    tmp_path: Path,
) -> None:
    def responses_line(custom_id: str, text: str) -> dict[str, Any]:
        return {
            "custom_id": custom_id,
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": MODEL, "input": text, "store": False},
        }

    lines = [
        responses_line("ok-1", "Hello"),
        responses_line("boom", "Fail please [[sim:status=500]]"),
        responses_line("ok-2", "Hello again"),
    ]
    async with proxy_and_simulator(data_dir=str(tmp_path)) as (url, _sim):
        client = openai_client(url)
        uploaded = await client.files.create(file=("r.jsonl", _jsonl(lines)), purpose="batch")
        created = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h"
        )
        batch = await _until_final(client, created.id)
        assert batch.status == "completed"  # as OpenAI: errored lines do not fail a batch
        assert batch.request_counts is not None
        assert batch.request_counts.model_dump() == {"total": 3, "completed": 2, "failed": 1}
        output = await _lines_of(client, batch.output_file_id)
        errors = await _lines_of(client, batch.error_file_id)
    assert [line["custom_id"] for line in output] == ["ok-1", "ok-2"]
    for line in output:
        response = OpenAIResponse.model_validate(line["response"]["body"])
        assert (response.status, response.model) == ("completed", MODEL)
        assert response.output_text
    [failed] = errors
    assert failed["custom_id"] == "boom" and failed["error"] is None
    assert failed["response"]["status_code"] >= 500
    assert failed["response"]["body"]["error"]["type"]


async def test_uploads_that_are_not_batch_files_are_refused_and_leave_nothing(
    tmp_path: Path,
) -> None:
    async with proxy_and_simulator(data_dir=str(tmp_path)) as (url, _sim):
        client = openai_client(url)
        with pytest.raises(openai.BadRequestError) as purpose:
            await client.files.create(file=("a.jsonl", b"{}\n"), purpose="assistants")
        assert purpose.value.body["param"] == "purpose"  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            await client.batches.create(
                input_file_id="file-nope",
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
        uploaded = await client.files.create(file=("a.jsonl", b"{}\n"), purpose="batch")
        with pytest.raises(openai.BadRequestError) as endpoint:
            await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/embeddings",
                completion_window="24h",
            )
        assert endpoint.value.body["param"] == "endpoint"  # type: ignore[index]
        assert [f.id for f in (await client.files.list()).data] == [uploaded.id]


async def test_a_finished_batch_past_its_retention_is_purged_with_its_files_at_startup(
    tmp_path: Path,
) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path))
        async with running_proxy(settings) as url:
            client = openai_client(url)
            uploaded = await client.files.create(
                file=("in.jsonl", _jsonl([_text(1)])), purpose="batch"
            )
            created = await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            batch = await _until_final(client, created.id)
            assert batch.status == "completed" and batch.output_file_id is not None
        await trio.sleep(0.01)
        async with running_proxy(settings.replace(batch_retention_days=1e-9)) as url:
            client = openai_client(url)
            with trio.fail_after(5):
                while (await client.batches.list()).data:  # noqa: ASYNC110
                    await trio.sleep(0.02)
            for file_id in (uploaded.id, batch.output_file_id):
                with pytest.raises(openai.NotFoundError):
                    await client.files.retrieve(file_id)


async def test_malformed_or_incomplete_multipart_uploads_are_400s_that_store_nothing(
    tmp_path: Path,
) -> None:
    async with (
        proxy_and_simulator(data_dir=str(tmp_path)) as (url, _sim),
        httpx2.AsyncClient(base_url=url) as http,
    ):
        no_purpose = await http.post("/v1/files", files={"file": ("a.jsonl", b"{}\n")})
        assert no_purpose.status_code == 400
        assert no_purpose.json()["error"]["code"] == "missing_required_parameter"
        cut = await http.post(
            "/v1/files",
            content=b'--xx\r\nContent-Disposition: form-data; name="file"; '
            b'filename="a.jsonl"\r\n\r\n{"half',
            headers={"Content-Type": "multipart/form-data; boundary=xx"},
        )
        assert cut.status_code == 400
        not_multipart = await http.post("/v1/files", json={"purpose": "batch"})
        assert not_multipart.status_code == 400
        assert (await http.get("/v1/files")).json()["data"] == []
    contents = tmp_path / "files"
    assert not contents.exists() or list(contents.iterdir()) == []


async def test_two_hundred_lines_come_back_complete_and_in_input_order(tmp_path: Path) -> None:
    extra = [
        {**line, "custom_id": f"{line['custom_id']}#{n}"}
        for n, line in enumerate([TOOL_LINE, SCHEMA_LINE] * 3)
    ]
    lines = [_text(n) for n in range(194)] + extra
    async with proxy_and_simulator(data_dir=str(tmp_path)) as (url, _sim):
        client = openai_client(url)
        uploaded = await client.files.create(file=("in.jsonl", _jsonl(lines)), purpose="batch")
        created = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        batch = await _until_final(client, created.id)
        output = await _lines_of(client, batch.output_file_id)
    assert batch.status == "completed" and batch.error_file_id is None
    assert [line["custom_id"] for line in output] == [line["custom_id"] for line in lines]
    assert len({line["id"] for line in output}) == 200
