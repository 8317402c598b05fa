"""The simulator's Message Batches, driven by the official ``anthropic`` SDK over loopback.

A batch is created, polled until it ends and its results file parsed by the SDK; cancelled
mid-way and while queued; expired; refused for a bad envelope; listed page by page; and
deleted. The processing schedule itself is checked in process under ``autojump_clock``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx2
import pytest
import trio
from support import Sim, anthropic_client, running_simulator

from trio_batcher.simulator import SimulatorConfig
from trio_batcher.simulator.batches import BatchBook, BatchRequest, parse_envelope
from trio_batcher.simulator.batches_work import run_batch
from trio_batcher.simulator.errors import SimulatorInvalidRequest
from trio_batcher.simulator.state import SimulatorState

MODEL = "claude-haiku-4-5"
HEADERS = {"x-api-key": "sk-test-batches", "anthropic-version": "2023-06-01"}


def params(text: str = "Hello there, batch", **changes: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
        **changes,
    }


def requests(count: int, text: str = "question") -> list[dict[str, Any]]:
    return [{"custom_id": f"req-{i}", "params": params(f"{text} {i}")} for i in range(count)]


@asynccontextmanager
async def simulated(**config: Any) -> AsyncIterator[tuple[Sim, Any]]:
    async with running_simulator(SimulatorConfig(**config)) as sim:
        client = anthropic_client(sim.url, api_key="sk-test-batches")
        try:
            yield sim, client
        finally:
            with trio.CancelScope(shield=True):
                await client.close()


async def wait_ended(client: Any, batch_id: str) -> Any:
    with trio.fail_after(20):
        while True:
            batch = await client.messages.batches.retrieve(batch_id)
            if batch.processing_status == "ended":
                return batch
            await trio.sleep(0.02)


async def results(client: Any, batch_id: str) -> dict[str, Any]:
    decoder = await client.messages.batches.results(batch_id)
    found: dict[str, Any] = {}
    async for entry in decoder:
        assert entry.custom_id not in found
        found[entry.custom_id] = entry.result
    return found


async def test_a_batch_ends_with_the_replies_a_messages_call_gives() -> None:
    batch_requests = [
        *requests(3),
        {"custom_id": "no-max-tokens", "params": {"model": MODEL, "messages": []}},
        {"custom_id": "other-vendor", "params": params(model="gpt-4o")},
    ]
    async with simulated(batch_request_s=0.01) as (_, client):
        created = await client.messages.batches.create(requests=batch_requests)
        assert created.id.startswith("msgbatch_")
        assert created.processing_status == "in_progress"
        assert created.request_counts.processing == 5
        assert created.results_url is None and created.ended_at is None
        assert (created.expires_at - created.created_at).total_seconds() == pytest.approx(86400)

        ended = await wait_ended(client, created.id)
        counts = ended.request_counts
        assert (counts.processing, counts.succeeded, counts.errored) == (0, 3, 2)
        assert counts.canceled == counts.expired == 0
        assert ended.ended_at is not None and ended.ended_at >= ended.created_at
        assert ended.results_url == f"{client.base_url}".rstrip("/") + (
            f"/v1/messages/batches/{created.id}/results"
        )

        found = await results(client, created.id)
        assert set(found) == {r["custom_id"] for r in batch_requests}
        for i in range(3):
            result = found[f"req-{i}"]
            assert result.type == "succeeded"
            realtime = await client.messages.create(**params(f"question {i}"))
            assert result.message.content == realtime.content
            assert result.message.usage.input_tokens == realtime.usage.input_tokens
            assert result.message.usage.output_tokens == realtime.usage.output_tokens
            assert result.message.usage.service_tier == "batch"
        invalid = found["no-max-tokens"]
        assert invalid.type == "errored"
        assert invalid.error.error.type == "invalid_request_error"
        assert invalid.error.error.message.startswith("max_tokens: Field required")
        assert found["other-vendor"].error.error.type == "not_found_error"


async def test_sim_directives_make_a_request_error_with_the_matching_error() -> None:
    batch_requests = [
        {"custom_id": "fine", "params": params("all good")},
        {"custom_id": "boom", "params": params("[[sim:status=500]] explode")},
        {"custom_id": "busy", "params": params("[[sim:status=529]] overloaded")},
        {"custom_id": "limited", "params": params("[[sim:status=429]] slow down")},
        {"custom_id": "typo", "params": params("[[sim:stauts=500]] misspelt")},
    ]
    async with simulated() as (_, client):
        created = await client.messages.batches.create(requests=batch_requests)
        ended = await wait_ended(client, created.id)
        assert (ended.request_counts.succeeded, ended.request_counts.errored) == (1, 4)
        found = await results(client, created.id)
    assert found["fine"].type == "succeeded"
    kinds = {cid: found[cid].error.error.type for cid in ("boom", "busy", "limited", "typo")}
    assert kinds == {
        "boom": "api_error",
        "busy": "overloaded_error",
        "limited": "rate_limit_error",
        "typo": "invalid_request_error",
    }
    assert found["busy"].error.error.message == "Overloaded"
    assert found["boom"].error.type == "error"


async def test_cancel_mid_way_delivers_the_finished_and_cancels_the_rest() -> None:
    async with simulated(batch_request_s=0.3) as (_, client):
        created = await client.messages.batches.create(requests=requests(6))
        await trio.sleep(0.45)  # the first request is done, the second under way
        canceling = await client.messages.batches.cancel(created.id)
        assert canceling.processing_status == "canceling"
        assert canceling.cancel_initiated_at is not None
        assert canceling.request_counts.processing == 6
        again = await client.messages.batches.cancel(created.id)  # idempotent while canceling
        assert again.cancel_initiated_at == canceling.cancel_initiated_at

        ended = await wait_ended(client, created.id)
        counts = ended.request_counts
        assert counts.succeeded >= 1 and counts.canceled >= 1
        assert counts.succeeded + counts.canceled == 6
        assert ended.ended_at >= canceling.cancel_initiated_at
        found = await results(client, created.id)
        kinds = [found[f"req-{i}"].type for i in range(6)]
        # processed in order: the finished ones first, then only canceled ones
        assert kinds == ["succeeded"] * counts.succeeded + ["canceled"] * counts.canceled

        with pytest.raises(anthropic.BadRequestError):
            await client.messages.batches.cancel(created.id)


async def test_cancel_while_queued_ends_the_batch_with_every_request_canceled() -> None:
    async with simulated(batch_processing_s=3600) as (_, client):
        created = await client.messages.batches.create(requests=requests(3))
        await client.messages.batches.cancel(created.id)
        ended = await wait_ended(client, created.id)
        assert ended.request_counts.canceled == 3
        found = await results(client, created.id)
    assert {r.type for r in found.values()} == {"canceled"}


async def test_requests_unprocessed_at_expiry_are_expired() -> None:
    batch_requests = [
        {"custom_id": "stuck", "params": params("[[sim:hang=1]] never answered")},
        *requests(2),
    ]
    async with simulated(batch_expiry_s=0.5) as (_, client):
        created = await client.messages.batches.create(requests=batch_requests)
        ended = await wait_ended(client, created.id)
        assert ended.request_counts.expired == 3
        assert ended.cancel_initiated_at is None
        assert 0 <= (ended.ended_at - ended.expires_at).total_seconds() < 0.2
        found = await results(client, created.id)
    assert {r.type for r in found.values()} == {"expired"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"requests": []}, "requests: List should have at least 1 item"),
        ({}, "requests: Field required"),
        ({"requests": requests(1), "extra": 1}, "extra: Extra inputs are not permitted"),
        ({"requests": [{"custom_id": "a b", "params": params()}]}, "requests.0.custom_id:"),
        ({"requests": [{"custom_id": "x" * 65, "params": params()}]}, "requests.0.custom_id:"),
        ({"requests": [{"params": params()}]}, "requests.0.custom_id: Field required"),
        ({"requests": [{"custom_id": "a"}]}, "requests.0.params: Field required"),
        ({"requests": [{"custom_id": "a", "params": []}]}, "requests.0.params: Input should"),
        (
            {"requests": [{"custom_id": "a", "params": params()}] * 2},
            "requests.1.custom_id: Duplicate custom_id 'a'",
        ),
    ],
)
async def test_a_malformed_envelope_is_refused_with_400(body: Any, message: str) -> None:
    async with simulated() as (sim, client):
        async with httpx2.AsyncClient() as http:
            response = await http.post(f"{sim.url}/v1/messages/batches", json=body, headers=HEADERS)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith(message)
        page = await client.messages.batches.list()
        assert page.data == []  # nothing was created


async def test_more_than_100000_requests_are_refused() -> None:
    with pytest.raises(SimulatorInvalidRequest, match="at most 100000 items"):
        parse_envelope({"requests": [{"custom_id": "a", "params": {}}] * 100_001})


async def test_the_sdk_sees_a_bad_custom_id_as_a_bad_request() -> None:
    async with simulated() as (_, client):
        with pytest.raises(anthropic.BadRequestError, match="custom_id"):
            await client.messages.batches.create(
                requests=[{"custom_id": "not/allowed", "params": params()}]
            )


async def test_list_pages_newest_first_both_ways() -> None:
    async with simulated(batch_processing_s=3600) as (_, client):
        ids = [(await client.messages.batches.create(requests=requests(1))).id for _ in range(5)]
        newest_first = ids[::-1]
        first = await client.messages.batches.list(limit=2)
        assert [b.id for b in first.data] == newest_first[:2]
        assert first.has_more and first.first_id == newest_first[0]
        assert first.last_id == newest_first[1]
        every = [b.id async for b in await client.messages.batches.list(limit=2)]
        assert every == newest_first
        last = await client.messages.batches.list(limit=2, after_id=newest_first[3])
        assert [b.id for b in last.data] == newest_first[4:] and not last.has_more
        newer = await client.messages.batches.list(limit=2, before_id=newest_first[3])
        assert [b.id for b in newer.data] == newest_first[1:3] and newer.has_more


async def test_delete_needs_an_ended_batch_and_forgets_it() -> None:
    async with simulated(batch_processing_s=3600) as (sim, client):
        created = await client.messages.batches.create(requests=requests(2))
        with pytest.raises(anthropic.BadRequestError, match="cannot be deleted"):
            await client.messages.batches.delete(created.id)
        with pytest.raises(anthropic.AnthropicError, match="results_url"):
            await client.messages.batches.results(created.id)
        async with httpx2.AsyncClient() as http:
            early = await http.get(
                f"{sim.url}/v1/messages/batches/{created.id}/results", headers=HEADERS
            )
        assert early.status_code == 404
        assert early.json()["error"]["type"] == "not_found_error"

        await client.messages.batches.cancel(created.id)
        await wait_ended(client, created.id)
        deleted = await client.messages.batches.delete(created.id)
        assert (deleted.id, deleted.type) == (created.id, "message_batch_deleted")
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.batches.retrieve(created.id)
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.batches.delete(created.id)


async def test_the_book_forgets_the_oldest_ended_batch_and_refuses_when_all_run() -> None:
    async with simulated(batch_processing_s=3600, batch_entries=2) as (_, client):
        first = await client.messages.batches.create(requests=requests(1))
        second = await client.messages.batches.create(requests=requests(1))
        with pytest.raises(anthropic.RateLimitError):
            await client.messages.batches.create(requests=requests(1))
        await client.messages.batches.cancel(first.id)
        await wait_ended(client, first.id)
        third = await client.messages.batches.create(requests=requests(1))
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.batches.retrieve(first.id)
        kept = [b.id async for b in await client.messages.batches.list()]
        assert kept == [third.id, second.id]


async def test_the_schedule_is_exact_under_autojump(autojump_clock: trio.abc.Clock) -> None:
    state = SimulatorState(
        SimulatorConfig(batch_processing_s=5, batch_request_s=2, batch_expiry_s=100)
    )
    book = BatchBook(4)
    whole = book.add(
        [BatchRequest(f"r{i}", params(f"q {i}")) for i in range(3)],
        api_version="2023-06-01",
        betas=frozenset(),
        expiry_s=100,
    )
    short = book.add(
        [BatchRequest(f"r{i}", params(f"q {i}")) for i in range(3)],
        api_version="2023-06-01",
        betas=frozenset(),
        expiry_s=8,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_batch, state, whole)
        nursery.start_soon(run_batch, state, short)
        await trio.sleep(6)
        assert whole.status == "in_progress" and not whole.results
    assert whole.ended_at == 11  # 5 s queued, then 3 requests of 2 s
    assert whole.counts["succeeded"] == 3
    assert short.ended_at == 8  # one request done at 7, the next cut short by expiry
    assert (short.counts["succeeded"], short.counts["expired"]) == (1, 2)
    assert whole.to_json("http://sim")["request_counts"]["processing"] == 0
