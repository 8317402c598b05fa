"""The flex window as data and time: when it flushes, and what shutdown does (autojump)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
import trio

from trio_batcher.pipeline.flex_window import FlexClosed, FlexResult, FlexWindow


class _Batches:
    """A Message Batches API whose batches never end; it records what it was asked."""

    def __init__(self) -> None:
        self.created: list[tuple[float, list[str]]] = []
        self.cancelled: list[str] = []

    async def create(self, body: bytes) -> dict[str, Any]:
        ids = [r["custom_id"] for r in json.loads(body)["requests"]]
        self.created.append((trio.current_time(), ids))
        return {"id": f"msgbatch_{len(self.created)}"}

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        return {"id": batch_id, "processing_status": "in_progress"}

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        self.cancelled.append(batch_id)
        return {"id": batch_id}

    async def results(self, batch_id: str) -> AsyncGenerator[bytes, None]:
        raise AssertionError("never ends")
        yield b""  # pragma: no cover


async def test_a_window_flushes_its_time_after_the_first_request_and_shutdown_answers_503(
    autojump_clock: trio.abc.Clock,
) -> None:
    api = _Batches()
    window = FlexWindow(api, size=10, window_s=2.0, max_pending=10)
    answers: list[FlexResult] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(window.run)
        first = window.join(b'{"model":"m"}', "m")
        await trio.sleep(1.5)
        second = window.join(b'{"model":"m"}', "m")
        for ticket in (first, second):
            nursery.start_soon(lambda t=ticket: _collect(t, answers))
        await trio.sleep(1.0)
        assert api.created == [(2.0, [first.custom_id, second.custom_id])]
        window.close()  # graceful shutdown: no new request, the waiting ones still wait
        with pytest.raises(FlexClosed):
            window.join(b"{}", "m")
        await trio.sleep(60)
        assert answers == [] and window.pending == 2
        window.fail_remaining()  # the grace period is over
        await window.wait_idle()
        await trio.sleep(0.001)  # the batch task wakes at once and cancels the batch upstream
        assert [a.outcome for a in answers] == ["shutdown", "shutdown"]
        assert api.cancelled == ["msgbatch_1"]
        nursery.cancel_scope.cancel()


async def _collect(ticket: Any, into: list[FlexResult]) -> None:
    into.append(await ticket.wait())
