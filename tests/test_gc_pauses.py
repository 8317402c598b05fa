"""The garbage collector's pauses, as ``/metrics`` and Prometheus report them."""

from __future__ import annotations

import gc

import httpx2
from support import proxy_and_simulator

from trio_batcher.observatory.gc_pauses import GcPauses


def test_every_collection_is_counted_and_timed_by_generation() -> None:
    pauses = GcPauses()
    pauses.install()
    try:
        gc.collect(0)
        gc.collect()
        gc.collect()
    finally:
        pauses.uninstall()
    gc.collect()  # after uninstall: not counted
    stats = pauses.statistics()
    assert stats.collections[0] >= 1 and stats.collections[2] >= 2
    assert stats.pause_s_total[2] >= stats.pause_s_max[2] > 0
    assert gc.callbacks.count(pauses) == 0


def test_installing_twice_counts_once() -> None:
    pauses = GcPauses()
    pauses.install()
    pauses.install()
    try:
        gc.collect()
    finally:
        pauses.uninstall()
    assert pauses.statistics().collections[2] == 1


async def test_metrics_report_the_pauses_and_the_app_uninstalls_its_observer() -> None:
    before = len(gc.callbacks)
    async with proxy_and_simulator(metrics_enabled=True) as (url, _sim):
        assert len(gc.callbacks) == before + 1
        gc.collect()
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(f"{url}/metrics")).json()
            text = (await http.get(f"{url}/metrics/prometheus")).text
    assert len(gc.callbacks) == before
    full = metrics["gc"]["2"]
    assert full["collections"] >= 1 and full["pause_seconds_max"] > 0
    assert 'trio_batcher_gc_collections_total{generation="2"}' in text
    assert 'trio_batcher_gc_pause_seconds_total{generation="2"}' in text
    assert 'trio_batcher_gc_pause_max_seconds{generation="2"}' in text


def test_a_collection_near_the_recursion_limit_is_skipped_not_raised() -> None:
    class AtTheLimit(dict[str, int]):
        """What a callback meets a few frames short of the recursion limit: any call or
        comparison raises."""

        def get(self, *args: object) -> int:  # type: ignore[override]
            raise RecursionError("maximum recursion depth exceeded in comparison")

    pauses = GcPauses()
    pauses("start", {"generation": 0})
    pauses("stop", AtTheLimit())  # an exception here would be an unraisable error
    assert sum(pauses.statistics().collections) == 0  # that one went unmeasured
    pauses("start", {"generation": 0})
    pauses("stop", {"generation": 0})
    assert pauses.statistics().collections[0] == 1  # and the next is measured again
