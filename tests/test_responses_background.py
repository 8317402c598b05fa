"""Background responses (``background: true``) with the official ``openai`` SDK (strict
validation), over loopback against the simulator: accepted at once and completed later,
cancelled (the upstream call closed), streamed and resumed after a disconnect with
``starting_after``, refused without ``store``, failed with a reason across a restart, and
invisible to another key.
"""

from __future__ import annotations

import json
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support import (
    Sim,
    openai_client,
    proxy_and_simulator,
    proxy_settings,
    running_proxy,
    running_simulator,
)

from trio_batcher.observatory.background import BackgroundCollector, BackgroundStats
from trio_batcher.store import SQLiteResponseStore, StoredResponse
from trio_batcher.store.deployment import deployment_of

MODEL = "claude-sonnet-4-5"


async def _messages_calls(sim: Sim) -> int:
    return sum(1 for e in await sim.received() if e["path"] == "/v1/messages")


async def _until_status(client: Any, response_id: str, *statuses: str) -> Any:
    """Poll ``retrieve`` until the response has one of ``statuses`` (as a client would);
    the caller puts a deadline around it."""
    while (found := await client.responses.retrieve(response_id)).status not in statuses:  # noqa: ASYNC110
        await trio.sleep(0.02)
    return found


async def test_create_answers_queued_at_once_and_a_later_retrieve_has_the_completed_response() -> (
    None
):
    async with proxy_and_simulator(metrics_enabled=True) as (url, sim):
        client = openai_client(url)
        started = time.monotonic()
        response = await client.responses.create(
            model=MODEL, input="Hello there [[sim:ttft_ms=1500]]", background=True
        )
        answered_in = time.monotonic() - started
        assert answered_in < 1.0  # the upstream takes 1.5 s to its first token
        assert response.status == "queued" and response.background is True
        assert response.output == [] and response.usage is None
        assert response.id.startswith("resp_")

        with trio.fail_after(10):
            done = await _until_status(client, response.id, "completed", "failed")
        assert done.status == "completed", done.error
        assert "Hello there" in done.output_text
        assert done.background is True and done.usage is not None
        assert done.usage.output_tokens > 0
        assert await _messages_calls(sim) == 1
        # The same object as a foreground call would have stored, and chainable.
        follow = await client.responses.create(
            model=MODEL, input="And again", previous_response_id=response.id
        )
        assert follow.status == "completed"
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(f"{url}/metrics")).json()
    background = metrics["background"]
    assert background["accepted"] == 1 and background["completed"] == 1
    assert background["queued"] == 0 and background["running"] == 0
    assert background["queue_wait_s"]["p50"] is not None
    assert metrics["by_surface"]["openai.responses"]["requests"]["by_status"] == {"200": 2}


async def test_cancel_while_in_progress_closes_the_upstream_call_and_is_idempotent() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        response = await client.responses.create(
            model=MODEL, input="Take your time [[sim:hang=1]]", background=True
        )
        with trio.fail_after(5):
            await sim.wait_until(lambda s: s["in_flight"] == 1)
            running = await _until_status(client, response.id, "in_progress")
        assert running.output == []

        cancelled = await client.responses.cancel(response.id)
        assert cancelled.status == "cancelled" and cancelled.id == response.id
        with trio.fail_after(5):
            stats = await sim.wait_until(lambda s: s["in_flight"] == 0)
        assert stats["abandoned"] == 1  # the upstream saw the connection close
        assert (await client.responses.retrieve(response.id)).status == "cancelled"
        again = await client.responses.cancel(response.id)
        assert again.model_dump() == cancelled.model_dump()

        # A foreground response cannot be cancelled; an unknown one is a 404.
        foreground = await client.responses.create(model=MODEL, input="Quick one")
        with pytest.raises(openai.BadRequestError):
            await client.responses.cancel(foreground.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.cancel("resp_unknown")


async def test_a_queued_response_can_be_cancelled_before_it_runs_and_a_full_queue_is_429() -> None:
    async with proxy_and_simulator(background_max_running=1, background_max_queued=1) as (
        url,
        sim,
    ):
        client = openai_client(url)
        first = await client.responses.create(
            model=MODEL, input="One [[sim:hang=1]]", background=True
        )
        second = await client.responses.create(model=MODEL, input="Two", background=True)
        with pytest.raises(openai.RateLimitError) as refused:
            await client.responses.create(model=MODEL, input="Three", background=True)
        assert refused.value.code == "background_queue_full"
        with trio.fail_after(5):
            await sim.wait_until(lambda s: s["in_flight"] == 1)
        assert (await client.responses.retrieve(second.id)).status == "queued"
        assert (await client.responses.cancel(second.id)).status == "cancelled"
        assert (await client.responses.cancel(first.id)).status == "cancelled"
        assert await _messages_calls(sim) == 1  # the queued one never reached the upstream


async def test_a_streamed_background_response_survives_a_disconnect_and_resumes() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        stream = await client.responses.create(
            model=MODEL,
            input="Tell a story [[sim:tokens=40,tokens_per_s=40]]",
            background=True,
            stream=True,
        )
        seen: list[Any] = []
        async with aclosing(stream.__aiter__()) as events:
            async for event in events:
                seen.append(event)
                if event.type == "response.output_text.delta" and len(seen) >= 8:
                    break
        await stream.close()  # the client goes away mid-stream
        assert [e.type for e in seen[:3]] == [
            "response.created",
            "response.queued",
            "response.in_progress",
        ]
        assert seen[0].response.status == "queued" and seen[0].response.background is True
        assert [e.sequence_number for e in seen] == list(range(len(seen)))
        response_id = seen[0].response.id
        last = seen[-1].sequence_number

        resumed = await client.responses.retrieve(response_id, stream=True, starting_after=last)
        rest = [event async for event in resumed]
        assert [e.sequence_number for e in rest] == list(range(last + 1, last + 1 + len(rest)))
        assert rest[-1].type == "response.completed"
        final = rest[-1].response
        text = "".join(e.delta for e in [*seen, *rest] if e.type == "response.output_text.delta")
        assert text == final.output_text and final.status == "completed"

        stored = await client.responses.retrieve(response_id)
        assert stored.status == "completed" and stored.output_text == final.output_text
        # Replaying from the start gives every event again, in order.
        again = await client.responses.retrieve(response_id, stream=True)
        replay = [event async for event in again]
        assert [e.sequence_number for e in replay] == list(range(last + 1 + len(rest)))
        assert (await sim.stats())["abandoned"] == 0  # the disconnect did not cancel it


async def test_background_needs_store_and_bad_input_stores_nothing() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model=MODEL, input="Hi", background=True, store=False)
        assert refused.value.param == "background"
        error = refused.value.body
        assert isinstance(error, dict) and error["type"] == "invalid_request_error"
        with pytest.raises(openai.BadRequestError) as bad:
            await client.responses.create(
                model=MODEL, input="Hi", background=True, temperature="hot"
            )
        assert bad.value.param == "temperature"
        assert await _messages_calls(sim) == 0


async def test_another_key_cannot_see_or_cancel_a_background_response() -> None:
    async with proxy_and_simulator(proxy_api_keys=("key-a", "key-b")) as (url, _sim):
        owner = openai_client(url, api_key="key-a")
        other = openai_client(url, api_key="key-b")
        response = await owner.responses.create(
            model=MODEL, input="Mine [[sim:ttft_ms=300]]", background=True
        )
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            await other.responses.cancel(response.id)
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(response.id, stream=True)
        with trio.fail_after(10):
            done = await _until_status(owner, response.id, "completed")
        assert "Mine" in done.output_text


async def test_a_graceful_shutdown_fails_the_unfinished_ones_with_a_reason(tmp_path: Path) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path / "data"), shutdown_grace_s=0.2)
        async with running_proxy(settings) as url:
            client = openai_client(url)
            running = await client.responses.create(
                model=MODEL, input="Forever [[sim:hang=1]]", background=True
            )
            with trio.fail_after(5):
                await sim.wait_until(lambda s: s["in_flight"] == 1)
        async with running_proxy(settings) as url:
            client = openai_client(url)
            found = await client.responses.retrieve(running.id)
    assert found.status == "failed" and found.error is not None
    assert found.error.code == "server_error"
    assert "shut down" in found.error.message


async def test_one_left_in_progress_by_a_process_that_died_is_failed_at_startup(
    tmp_path: Path,
) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path / "data"))
        store = SQLiteResponseStore(tmp_path / "data", deployment=deployment_of(settings))
        now = time.time()
        left = {
            "id": "resp_left_behind",
            "object": "response",
            "created_at": int(now),
            "status": "in_progress",
            "background": True,
            "model": MODEL,
            "output": [],
            "usage": None,
            "error": None,
        }
        # The dead process's lease ran out a moment ago; a live one's is left alone.
        await store.lease(["resp_left_behind"], "dead-process", now - 1)
        await store.put(StoredResponse("resp_left_behind", "", now, now + 3600, None, left))
        await store.lease(["resp_still_running"], "live-process", now + 60)
        running = {**left, "id": "resp_still_running"}
        await store.put(StoredResponse("resp_still_running", "", now, now + 3600, None, running))
        await store.aclose()
        async with running_proxy(settings) as url, httpx2.AsyncClient() as http:
            answer = await http.get(f"{url}/v1/responses/resp_left_behind")
            other = await http.get(f"{url}/v1/responses/resp_still_running")
    assert other.json()["status"] == "in_progress"
    body = json.loads(answer.text)
    assert body["status"] == "failed"
    assert body["error"]["code"] == "server_error"
    assert "stopped" in body["error"]["message"]


def test_the_background_prometheus_families_are_in_the_docs_table() -> None:
    stats = BackgroundStats()
    stats.record_accepted()
    stats.record_started(0.25)
    stats.record_finished("completed", started=True)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BackgroundCollector(stats))
    doc = (Path(__file__).parent.parent / "docs" / "metrics.md").read_text()
    rows = {line.split("`")[1]: line for line in doc.splitlines() if line.startswith("| `trio_")}
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    assert len(families) == 4
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {k for sample in family.samples for k in sample.labels}
        assert name in rows and all(f"`{label}`" in rows[name] for label in labels), name
    assert stats.snapshot()["queue_wait_s"]["p50"] == 0.25
