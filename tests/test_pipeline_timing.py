"""The request pipeline's timing split under a virtual clock, with an in-memory upstream.

No sockets: ``Pipeline`` runs against a fake upstream whose calls take exactly one
virtual second, so queue waits and totals can be asserted with ``==``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from trio_batcher.admission.dispatch import Dispatcher
from trio_batcher.admission.gate import AdmissionGate
from trio_batcher.admission.windows import WindowPolicy
from trio_batcher.errors import ProxyError
from trio_batcher.observatory.metrics import MetricsRegistry
from trio_batcher.observatory.pricing import load_pricing
from trio_batcher.pipeline.contract import JSONReply
from trio_batcher.pipeline.core import Pipeline
from trio_batcher.settings import Settings
from trio_batcher.translation.openai_chat import (
    OpenAIChatCodec,
    TranslationOptions,
    translate_request,
)
from trio_batcher.upstream.client import UpstreamReply
from trio_batcher.upstream.request import UpstreamRequest
from trio_batcher.upstream.resilience import Resilience, ResilienceConfig
from trio_batcher.upstreams.fleet import Fleet

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 5},
}
_OPTIONS = TranslationOptions(
    default_model="claude-sonnet-4-5", default_max_tokens=1024, anthropic_version="2023-06-01"
)
BODY = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hello"}]}


class OneSecondUpstream:
    """Answers every call after exactly 1 s of virtual time, first byte at 0.25 s."""

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        started = trio.current_time()
        await trio.sleep(0.25)
        first_byte = trio.current_time()
        await trio.sleep(0.75)
        return UpstreamReply(
            dict(MESSAGE), {"request-id": "req_1"}, started, first_byte, trio.current_time()
        )


class FailsFirst(OneSecondUpstream):
    """The first ``failures`` calls answer 529 (retry after 2 s) after 1 s; then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        if self.failures:
            self.failures -= 1
            await trio.sleep(1)
            raise ProxyError(529, "Overloaded", upstream_status=529, retry_after=2.0)
        return await super().create_message(request)


@asynccontextmanager
async def pipeline(
    settings: Settings,
    dispatcher: Dispatcher,
    upstream: OneSecondUpstream | None = None,
    resilience: Resilience | None = None,
) -> AsyncIterator[tuple[Pipeline, MetricsRegistry]]:
    metrics = MetricsRegistry(window=100, pricing=load_pricing(None))
    gate = AdmissionGate(settings.max_inflight, settings.max_queue, settings.acquire_timeout_s)
    chat = Pipeline(
        settings=settings,
        fleet=Fleet.of_one(upstream or OneSecondUpstream(), resilience or Resilience()),
        dispatcher=dispatcher,
        gate=gate,
        metrics=metrics,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        yield chat, metrics
        dispatcher.close()


def _chat_request() -> tuple[UpstreamRequest, OpenAIChatCodec]:
    tr = translate_request(dict(BODY), _OPTIONS)
    request = UpstreamRequest(tr.body, tr.upstream_model, tr.stream, "openai.chat")
    return request, OpenAIChatCodec(tr, completion_id="chatcmpl-1", created=0)


async def _fire(chat: Pipeline, count: int) -> list[JSONReply]:
    replies: list[JSONReply] = []

    async def one() -> None:
        reply = await chat.handle(*_chat_request(), trio.current_time())
        assert isinstance(reply, JSONReply)
        replies.append(reply)

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    return replies


async def test_direct_path_adds_no_queue_wait(autojump_clock: trio.testing.MockClock) -> None:
    async with pipeline(Settings(), Dispatcher()) as (chat, metrics):
        replies = await _fire(chat, 3)
        assert trio.current_time() == 1.0
    assert {r.headers["Server-Timing"] for r in replies} == {
        "queue;dur=0.0, upstream;dur=1000.0, ttfb;dur=250.0, overhead;dur=0.0, total;dur=1000.0"
    }
    timing = metrics.snapshot()["timing"]
    assert timing["queue_ms"]["max"] == 0.0
    assert timing["upstream_ms"]["p50"] == 1000.0
    assert timing["upstream_ttfb_ms"]["p50"] == 250.0


async def test_batching_queue_wait_is_exactly_the_window_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    settings = Settings(batch_enabled=True, batch_max_wait_ms=20, batch_max_size=100)
    batcher = Dispatcher(
        limiter=trio.CapacityLimiter(16),
        windows=WindowPolicy(max_size=100, max_wait=0.02, window_timeout=600),
    )
    async with pipeline(settings, batcher) as (chat, metrics):
        replies = await _fire(chat, 3)
        assert trio.current_time() == 1.02
    assert {r.headers["Server-Timing"] for r in replies} == {
        "queue;dur=20.0, upstream;dur=1000.0, ttfb;dur=250.0, overhead;dur=0.0, total;dur=1020.0"
    }
    snapshot = metrics.snapshot()
    assert snapshot["timing"]["queue_ms"]["p50"] == 20.0
    assert (
        snapshot["latency"]["p50_ms"] == 1020.0
    )  # the window wait is part of what the caller paid


async def test_queue_wait_includes_the_limiter_and_the_gate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # cap 2 with 1 s calls: six requests start at 0, 0, 1, 1, 2, 2 after a 10 ms window.
    settings = Settings(batch_enabled=True, batch_max_wait_ms=10, batch_max_size=100)
    batcher = Dispatcher(
        limiter=trio.CapacityLimiter(2),
        windows=WindowPolicy(max_size=100, max_wait=0.01, window_timeout=600),
    )
    async with pipeline(settings, batcher) as (chat, metrics):
        await _fire(chat, 6)
    queue = metrics.snapshot()["timing"]["queue_ms"]
    assert (queue["p50"], queue["max"], queue["sample_count"]) == (1010.0, 2010.0, 6)
    # The gate: one slot, so the second request waits the first one's full second.
    async with pipeline(Settings(max_inflight=1, max_queue=4), Dispatcher()) as (
        chat,
        metrics,
    ):
        await _fire(chat, 2)
    queue = metrics.snapshot()["timing"]["queue_ms"]
    assert (queue["p50"], queue["max"]) == (0.0, 1000.0)


async def test_retries_and_their_waits_are_upstream_time_not_overhead(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A 529 after 1 s, a 2 s wait the upstream asked for, then a 1 s answer.
    async with pipeline(Settings(), Dispatcher(), FailsFirst(1)) as (chat, metrics):
        [reply] = await _fire(chat, 1)
    assert reply.headers["Server-Timing"] == (
        "queue;dur=0.0, upstream;dur=4000.0, ttfb;dur=250.0, overhead;dur=0.0, total;dur=4000.0"
    )
    assert metrics.snapshot()["timing"]["overhead_ms"]["max"] == 0.0


async def test_a_failed_call_is_upstream_time_and_its_error_says_so(
    autojump_clock: trio.testing.MockClock,
) -> None:
    no_retries = Resilience(ResilienceConfig(max_retries=0))
    async with pipeline(Settings(), Dispatcher(), FailsFirst(1), no_retries) as (
        chat,
        metrics,
    ):
        with pytest.raises(ProxyError) as caught:
            await chat.handle(*_chat_request(), trio.current_time())
    assert caught.value.status == 529
    assert caught.value.headers["Server-Timing"] == (
        "queue;dur=0.0, upstream;dur=1000.0, overhead;dur=0.0, total;dur=1000.0"
    )
    timing = metrics.snapshot()["timing"]
    assert (timing["upstream_ms"]["sample_count"], timing["upstream_ms"]["max"]) == (1, 1000.0)
    assert timing["overhead_ms"]["max"] == 0.0
