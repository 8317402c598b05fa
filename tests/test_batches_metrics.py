"""Batches by status in ``/metrics`` and Prometheus, read from the store at each scrape."""

from __future__ import annotations

from pathlib import Path

import httpx2
from prometheus_client import CollectorRegistry, generate_latest
from support import openai_client, proxy_settings, running_proxy, running_simulator
from test_batches_large import create, line, until_final

from trio_batcher.observatory.batch_status import (
    BATCH_STATUSES,
    BatchStatusCollector,
    BatchStatusGauge,
)
from trio_batcher.store import StoreUnavailable


async def test_a_finished_and_a_failed_batch_are_counted_by_status(tmp_path: Path) -> None:
    async with (
        running_simulator() as sim,
        running_proxy(proxy_settings(sim, data_dir=str(tmp_path), metrics_enabled=True)) as url,
        httpx2.AsyncClient(trust_env=False) as http,
    ):
        before = (await http.get(f"{url}/metrics")).json()["batches"]["by_status"]
        assert before == dict.fromkeys(BATCH_STATUSES, 0)
        client = openai_client(url)
        good = await until_final(client, (await create(client, line("a", 0))).id)
        bad = await until_final(client, (await create(client, b"not json\n")).id)
        assert (good.status, bad.status) == ("completed", "failed")
        counted = (await http.get(f"{url}/metrics")).json()["batches"]["by_status"]
        assert counted == {**dict.fromkeys(BATCH_STATUSES, 0), "completed": 1, "failed": 1}
        text = (await http.get(f"{url}/metrics/prometheus")).text
        assert "# TYPE trio_batcher_batches gauge" in text
        assert 'trio_batcher_batches{status="completed"} 1.0' in text
        assert 'trio_batcher_batches{status="failed"} 1.0' in text
        assert 'trio_batcher_batches{status="in_progress"} 0.0' in text


async def test_a_store_that_fails_leaves_the_section_and_the_gauge_out_until_it_answers() -> None:
    # What the metrics routes rely on: refresh never raises, every status is listed (an
    # unknown one the store might hold is not a label), and a failure takes the last counts
    # away rather than serving stale ones.
    answers: list[dict[str, int] | Exception] = [
        {"completed": 3, "in_progress": 1, "mystery": 9},
        StoreUnavailable("disk gone"),
        {},
    ]

    async def counts() -> dict[str, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    gauge = BatchStatusGauge(counts)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BatchStatusCollector(gauge))
    assert generate_latest(registry) == b""  # not refreshed yet: no family

    section = await gauge.refresh()
    assert section == {
        "by_status": {**dict.fromkeys(BATCH_STATUSES, 0), "completed": 3, "in_progress": 1}
    }
    text = generate_latest(registry).decode()
    assert "# HELP trio_batcher_batches " in text and "# TYPE trio_batcher_batches gauge" in text
    assert text.count("trio_batcher_batches{") == len(BATCH_STATUSES) and "mystery" not in text

    assert await gauge.refresh() is None
    assert generate_latest(registry) == b""

    assert await gauge.refresh() == {"by_status": dict.fromkeys(BATCH_STATUSES, 0)}
    assert 'trio_batcher_batches{status="completed"} 0.0' in generate_latest(registry).decode()
