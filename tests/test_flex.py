"""``service_tier: "flex"``: requests that can wait are answered through one Message Batch.

Live over loopback: the official ``openai`` SDK (strict) against the gateway, the
simulator as the upstream (it serves Message Batches and logs every request it receives,
so "one batch and no realtime call" is read off its log).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx2
import openai
import pytest
import trio
from fleet_support import gateway_and_simulator
from support import Sim, openai_client, proxy_and_simulator

from trio_batcher.observatory.pricing import TokenUsage, load_pricing
from trio_batcher.simulator import SimulatorConfig

MODEL = "claude-sonnet-4-5"
BATCHES = "/v1/messages/batches"


def _calls(received: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["method"], e["path"]) for e in received]


async def _metrics(url: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(trust_env=False) as http:
        answer: dict[str, Any] = (await http.get(f"{url}/metrics")).json()
        return answer


async def _until_metrics(url: str, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll ``/metrics`` until ``ready``; the caller puts a deadline around it."""
    while not ready(snapshot := await _metrics(url)):  # noqa: ASYNC110
        await trio.sleep(0.01)
    return snapshot


async def _until_received(sim: Sim, ready: Callable[[list[tuple[str, str]]], bool]) -> None:
    while not ready(_calls(await sim.received())):  # noqa: ASYNC110
        await trio.sleep(0.01)


def _ask(word: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{word} is the word"}]


async def test_four_concurrent_flex_chats_are_answered_through_one_message_batch() -> None:
    async with proxy_and_simulator(
        metrics_enabled=True, flex_window_size=4, flex_window_s=30.0
    ) as (url, sim):
        client = openai_client(url)
        replies: dict[str, Any] = {}

        async def ask(word: str) -> None:
            replies[word] = await client.chat.completions.create(
                model=MODEL, messages=_ask(word), service_tier="flex"
            )

        words = ("alpha", "bravo", "charlie", "delta")
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for word in words:
                    nursery.start_soon(ask, word)
        calls = _calls(await sim.received())
        assert calls.count(("POST", BATCHES)) == 1  # one window, four requests: full
        assert ("POST", "/v1/messages") not in calls  # no realtime call at all
        pricing, expected = load_pricing(None), Decimal(0)
        for word in words:
            reply = replies[word]
            assert reply.service_tier == "flex"
            assert reply.object == "chat.completion" and reply.model == MODEL
            assert word in (reply.choices[0].message.content or "")  # its own prompt's reply
            usage = reply.usage
            cost = pricing.cost(
                MODEL, TokenUsage(input=usage.prompt_tokens, output=usage.completion_tokens)
            )
            assert cost is not None
            expected += cost * Decimal("0.5")
        snapshot = await _metrics(url)
        flex = snapshot["flex"]
        assert flex["requests"] == 4 and flex["pending"] == 0
        assert flex["batches"]["submitted"] == 1 and flex["batches"]["by_reason"]["size"] == 1
        assert flex["batches"]["max_size"] == 4 and flex["batches"]["mean_size"] == 4
        assert flex["outcomes"]["succeeded"] == 4
        assert flex["wait"]["sample_count"] == 4
        assert flex["cost"]["batch_usd"] == pytest.approx(float(expected))
        assert flex["cost"]["realtime_usd"] == pytest.approx(float(expected * 2))
        assert flex["cost"]["saved_usd"] == pytest.approx(float(expected))
        # The gateway's own cost is the batch price too (no realtime call was made).
        assert snapshot["cost"]["estimated_cost_usd"] == pytest.approx(float(expected))
        assert snapshot["requests"]["success"] == 4
        async with httpx2.AsyncClient(trust_env=False) as http:
            text = (await http.get(f"{url}/metrics/prometheus")).text
        assert "trio_batcher_flex_requests_total 4.0" in text
        assert 'trio_batcher_flex_batches_total{reason="size"} 1.0' in text


async def test_a_flex_responses_call_is_answered_through_a_message_batch() -> None:
    async with proxy_and_simulator(flex_window_s=0.05) as (url, sim):
        client = openai_client(url)
        with trio.fail_after(30):
            response = await client.responses.create(
                model=MODEL, input="echo this sentence", service_tier="flex"
            )
        assert response.status == "completed" and response.service_tier == "flex"
        assert "echo" in response.output_text
        stored = await client.responses.retrieve(response.id)
        assert stored.service_tier == "flex"
        calls = _calls(await sim.received())
        assert calls.count(("POST", BATCHES)) == 1 and ("POST", "/v1/messages") not in calls


async def test_a_background_flex_response_completes_through_a_message_batch() -> None:
    """``background`` and ``service_tier: "flex"`` together: answered ``queued`` at once,
    run by the background runner through the same pipeline path, so through the flex
    window: one Message Batch, no realtime call, and the stored response says ``flex``."""
    async with proxy_and_simulator(metrics_enabled=True, flex_window_s=0.05) as (url, sim):
        client = openai_client(url)
        with trio.fail_after(30):
            created = await client.responses.create(
                model=MODEL, input="echo this sentence", service_tier="flex", background=True
            )
            assert created.status in ("queued", "in_progress") and created.background
            response = created
            while response.status in ("queued", "in_progress"):
                await trio.sleep(0.02)
                response = await client.responses.retrieve(created.id)
        assert response.status == "completed" and response.service_tier == "flex"
        assert "echo" in response.output_text
        calls = _calls(await sim.received())
        assert calls.count(("POST", BATCHES)) == 1 and ("POST", "/v1/messages") not in calls
        snapshot = await _metrics(url)
        assert snapshot["flex"]["outcomes"]["succeeded"] == 1
        assert snapshot["background"]["completed"] == 1


async def test_background_work_runs_in_the_deferrable_lane() -> None:
    """A background response (flex or not) is deferrable: when it goes through the gate
    it is counted in the deferrable lane; a foreground call in the interactive one."""
    async with proxy_and_simulator(metrics_enabled=True) as (url, _sim):
        client = openai_client(url)
        with trio.fail_after(30):
            created = await client.responses.create(model=MODEL, input="hi", background=True)
            while (await client.responses.retrieve(created.id)).status != "completed":  # noqa: ASYNC110
                await trio.sleep(0.02)
            await client.responses.create(model=MODEL, input="hi")
        lanes = (await _metrics(url))["lanes"]
        assert lanes["deferrable"]["admitted"] == 1
        assert lanes["interactive"]["admitted"] == 1


async def test_a_flex_error_result_is_the_error_the_realtime_call_gives() -> None:
    async with proxy_and_simulator(flex_window_s=0.05) as (url, sim):
        client = openai_client(url)
        refused = _ask("[[sim:status=400]] x")
        with trio.fail_after(30), pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model=MODEL, messages=refused, service_tier="flex")
        with pytest.raises(openai.BadRequestError) as realtime:
            await client.chat.completions.create(model=MODEL, messages=refused)
        assert caught.value.status_code == realtime.value.status_code
        assert caught.value.body == realtime.value.body
        assert _calls(await sim.received()).count(("POST", BATCHES)) == 1


@pytest.mark.parametrize("policy", ["realtime", "error"])
async def test_a_flex_wait_that_runs_out_follows_the_policy(policy: str) -> None:
    slow_batches = SimulatorConfig(batch_processing_s=3600)
    async with proxy_and_simulator(
        slow_batches,
        metrics_enabled=True,
        flex_window_s=0.01,
        flex_max_wait_s=0.5,
        flex_on_timeout=policy,
    ) as (url, sim):
        client = openai_client(url)
        with trio.fail_after(30):
            if policy == "realtime":
                reply = await client.chat.completions.create(
                    model=MODEL, messages=_ask("late"), service_tier="flex"
                )
                assert reply.service_tier == "default"  # served realtime, at full price
                assert "late" in (reply.choices[0].message.content or "")
            else:
                with pytest.raises(openai.RateLimitError) as caught:
                    await client.chat.completions.create(
                        model=MODEL, messages=_ask("late"), service_tier="flex"
                    )
                assert caught.value.code == "resource_unavailable"
                assert "FLEX_MAX_WAIT_S" in caught.value.message
            # Its only request gone, the batch is cancelled: nothing more is billed.
            await _until_received(sim, lambda calls: any(p.endswith("/cancel") for _, p in calls))
        calls = _calls(await sim.received())
        realtime_calls = calls.count(("POST", "/v1/messages"))
        assert realtime_calls == (1 if policy == "realtime" else 0)
        snapshot = await _metrics(url)
        flex = snapshot["flex"]
        assert flex["timeouts"] == {"realtime": 0, "error": 0, policy: 1}
        assert flex["batches"]["canceled"] == 1 and flex["pending"] == 0
        # Gone realtime, it still said it can wait: the deferrable lane.
        assert snapshot["lanes"]["deferrable"]["admitted"] == (1 if policy == "realtime" else 0)


async def test_a_client_that_leaves_before_the_flush_sends_nothing() -> None:
    async with proxy_and_simulator(
        metrics_enabled=True, flex_window_size=2, flex_window_s=60.0
    ) as (url, sim):
        client = openai_client(url)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: client.chat.completions.create(
                        model=MODEL, messages=_ask("gone"), service_tier="flex"
                    )
                )
                await _until_metrics(url, lambda m: m["flex"]["pending"] == 1)
                nursery.cancel_scope.cancel()  # the client disconnects
            await _until_metrics(url, lambda m: m["flex"]["pending"] == 0)
            # Two more fill the window: the batch holds them, not the one that left.
            async with trio.open_nursery() as nursery:
                for word in ("stay", "here"):
                    nursery.start_soon(
                        lambda w=word: client.chat.completions.create(
                            model=MODEL, messages=_ask(w), service_tier="flex"
                        )
                    )
        posts = [e for e in await sim.received() if e["path"] == BATCHES]
        assert len(posts) == 1
        sent = (
            json.loads(posts[0]["body"]) if isinstance(posts[0]["body"], str) else posts[0]["body"]
        )
        texts = [json.dumps(r["params"]["messages"][0]["content"]) for r in sent["requests"]]
        texts = ["stay" if "stay" in t else "here" if "here" in t else t for t in texts]
        assert sorted(texts) == ["here", "stay"]
        flex = (await _metrics(url))["flex"]
        assert flex["left_before_flush"] == 1 and flex["outcomes"]["succeeded"] == 2


async def test_when_every_member_of_a_batch_leaves_the_batch_is_cancelled() -> None:
    slow_batches = SimulatorConfig(batch_processing_s=3600)
    async with proxy_and_simulator(
        slow_batches, metrics_enabled=True, flex_window_size=2, flex_window_s=60.0
    ) as (url, sim):
        client = openai_client(url)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for word in ("one", "two"):
                    nursery.start_soon(
                        lambda w=word: client.chat.completions.create(
                            model=MODEL, messages=_ask(w), service_tier="flex"
                        )
                    )
                await _until_received(sim, lambda calls: ("POST", BATCHES) in calls)
                nursery.cancel_scope.cancel()  # both clients disconnect
            await _until_received(sim, lambda calls: any(p.endswith("/cancel") for _, p in calls))
            await _until_metrics(url, lambda m: m["flex"]["batches"]["canceled"] == 1)
        assert ("POST", "/v1/messages") not in _calls(await sim.received())


async def test_a_result_for_a_request_that_left_is_dropped_and_counted() -> None:
    # The batch takes a second: one of its two clients leaves meanwhile, the other waits.
    async with proxy_and_simulator(
        SimulatorConfig(batch_processing_s=1.0),
        metrics_enabled=True,
        flex_window_size=2,
        flex_window_s=60.0,
    ) as (url, sim):
        client = openai_client(url)
        kept: list[Any] = []

        async def stay() -> None:
            kept.append(
                await client.chat.completions.create(
                    model=MODEL, messages=_ask("kept"), service_tier="flex"
                )
            )

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stay)
                async with trio.open_nursery() as leaving:
                    leaving.start_soon(
                        lambda: client.chat.completions.create(
                            model=MODEL, messages=_ask("left"), service_tier="flex"
                        )
                    )
                    await _until_received(sim, lambda calls: ("POST", BATCHES) in calls)
                    leaving.cancel_scope.cancel()  # in the batch already: cannot be taken out
            await _until_metrics(url, lambda m: m["flex"]["dropped_results"] == 1)
        assert kept and kept[0].service_tier == "flex"


async def test_flex_on_a_stream_is_served_realtime_and_says_default() -> None:
    async with (
        proxy_and_simulator() as (url, sim),
        httpx2.AsyncClient(trust_env=False, timeout=30) as http,
    ):
        body = {"model": MODEL, "messages": _ask("streamed"), "service_tier": "flex"}
        answer = await http.post(f"{url}/v1/chat/completions", json={**body, "stream": True})
        assert answer.status_code == 200, answer.text
        chunks = [
            json.loads(line[5:])
            for line in answer.text.splitlines()
            if line.startswith("data:") and line != "data: [DONE]"
        ]
        assert "service_tier" in answer.headers["x-trio-batcher-ignored-params"].split(",")
        assert chunks and all(chunk["service_tier"] == "default" for chunk in chunks)
        calls = _calls(await sim.received())
        assert ("POST", "/v1/messages") in calls and ("POST", BATCHES) not in calls


async def test_other_tiers_are_served_realtime_ignored_and_echo_default() -> None:
    async with proxy_and_simulator() as (url, sim):
        client = openai_client(url)
        with trio.fail_after(30):
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL, messages=_ask("now"), service_tier="priority"
            )
        assert "service_tier" in raw.headers["x-trio-batcher-ignored-params"].split(",")
        assert raw.parse().service_tier == "default"
        assert ("POST", BATCHES) not in _calls(await sim.received())


async def test_flex_on_a_gateway_of_clouds_only_is_served_realtime() -> None:
    async with gateway_and_simulator("bedrock", SimulatorConfig()) as (url, sim):
        client = openai_client(url)
        with trio.fail_after(30):
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL, messages=_ask("cloud"), service_tier="flex"
            )
        assert "service_tier" in raw.headers["x-trio-batcher-ignored-params"].split(",")
        assert raw.parse().service_tier == "default"
        paths = [e["path"] for e in await sim.received()]
        assert BATCHES not in paths and any(p.startswith("/model/") for p in paths)
