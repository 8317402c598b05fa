from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from trio_batcher.observatory.metrics import (
    LATENCY_BUCKETS,
    Gauges,
    MetricsRegistry,
    Timing,
    percentile,
)
from trio_batcher.observatory.pricing import PriceTable, load_pricing

SONNET = "claude-sonnet-4-5-20250929"
MILLION = 1_000_000


@pytest.fixture(scope="module")
def pricing() -> PriceTable:
    return load_pricing(None)


@pytest.fixture
def registry(pricing: PriceTable) -> MetricsRegistry:
    return MetricsRegistry(window=1024, pricing=pricing)


def usage(inp: int = 0, out: int = 0, **extra: Any) -> dict[str, Any]:
    return {"input_tokens": inp, "output_tokens": out, **extra}


# -- percentiles ------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0, 1, 50, 95, 99, 100])
def test_a_single_sample_is_every_percentile(p: float) -> None:
    assert percentile([0.25], p) == 0.25


def test_nearest_rank_over_1_to_100() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 51  # round(49.5) == 50 (ties to even) -> the 51st value
    assert percentile(values, 95) == 95
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile(values, 0) == 1


def test_percentile_rank_is_clamped_into_the_window() -> None:
    assert percentile([1.0, 2.0, 3.0], 250) == 3.0
    assert percentile([1.0, 2.0, 3.0], -50) == 1.0


def test_snapshot_reports_nearest_rank_latency_of_the_window(registry: MetricsRegistry) -> None:
    for ms in reversed(range(1, 101)):  # arrival order must not matter
        registry.record_success(SONNET, usage(1, 1), Timing(total=ms / 1000))
    latency = registry.snapshot()["latency"]
    assert latency == {
        "p50_ms": 51.0,
        "p95_ms": 95.0,
        "p99_ms": 99.0,
        "max_ms": 100.0,
        "sample_count": 100,
        "window": 1024,
    }


def test_one_request_is_every_latency_percentile(registry: MetricsRegistry) -> None:
    registry.record_success(SONNET, usage(), Timing(total=0.0421234))
    latency = registry.snapshot()["latency"]
    assert latency["p50_ms"] == latency["p99_ms"] == latency["max_ms"] == 42.123


# -- the window -------------------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "kept"), [(0, 1), (-5, 1), (10**9, 100_000), (7, 7)])
def test_window_is_clamped_at_construction(pricing: PriceTable, asked: int, kept: int) -> None:
    assert MetricsRegistry(window=asked, pricing=pricing).window == kept


def test_the_window_keeps_only_the_most_recent_samples(pricing: PriceTable) -> None:
    registry = MetricsRegistry(window=3, pricing=pricing)
    for seconds in (9.0, 8.0, 0.001, 0.002, 0.003):
        registry.record_success(SONNET, usage(), Timing(total=seconds))
    snap = registry.snapshot()
    assert snap["latency"]["sample_count"] == 3
    assert snap["latency"]["max_ms"] == 3.0  # the slow start has rolled out
    assert snap["requests"]["total"] == 5  # counters stay all-time


# -- the empty snapshot -----------------------------------------------------------------------


def test_empty_snapshot_is_well_formed_with_null_percentiles(registry: MetricsRegistry) -> None:
    snap = registry.snapshot()
    json.dumps(snap)  # serialisable as is
    assert snap["requests"] == {"total": 0, "success": 0, "error": 0, "stream": 0, "by_status": {}}
    assert snap["latency"] == {
        "p50_ms": None,
        "p95_ms": None,
        "p99_ms": None,
        "max_ms": None,
        "sample_count": 0,
        "window": 1024,
    }
    assert snap["tokens"] == {
        "input": 0,
        "output": 0,
        "cache_read": 0,
        "cache_write": 0,
        "total": 0,
    }
    cost = snap["cost"]
    assert cost["estimated_cost_usd"] == 0.0
    assert cost["estimate_complete"] is True
    assert cost["unpriced"] == {
        "requests": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    assert cost["by_model"] == {}
    assert snap["rejected"] == {"total": 0, "by_reason": {}}
    assert snap["concurrency"] == {
        "active": None,
        "waiting": None,
        "upstream_in_flight": None,
        "upstream_cap": None,
        "trio_tasks": None,
    }
    assert snap["windows"] == {
        "flushed": 0,
        "by_reason": {"size": 0, "time": 0, "drain": 0},
        "mean_size": None,
    }
    assert snap["by_model"] == {}
    assert snap["by_tenant"] == {}
    empty = {"p50": None, "p95": None, "p99": None, "max": None, "sample_count": 0}
    assert snap["timing"] == {
        "queue_ms": empty,
        "upstream_ttfb_ms": empty,
        "ttft_ms": empty,
        "upstream_ms": empty,
        "overhead_ms": empty,
    }
    assert isinstance(snap["started_at"], str)
    assert snap["uptime_s"] >= 0


# -- success, cost, unpriced ------------------------------------------------------------------


def test_success_counts_tokens_and_exact_cost(registry: MetricsRegistry) -> None:
    registry.record_success(SONNET, usage(MILLION, MILLION), Timing(total=1.0))
    snap = registry.snapshot()
    assert snap["requests"] == {
        "total": 1,
        "success": 1,
        "error": 0,
        "stream": 0,
        "by_status": {"200": 1},
    }
    assert snap["tokens"]["input"] == snap["tokens"]["output"] == MILLION
    assert snap["tokens"]["total"] == 2 * MILLION
    assert snap["cost"]["estimated_cost_usd"] == 18.0
    assert snap["cost"]["estimate_complete"] is True
    assert snap["cost"]["by_model"] == {SONNET: 18.0}
    assert snap["by_model"][SONNET] == {
        "requests": 1,
        "errors": 0,
        "input_tokens": MILLION,
        "output_tokens": MILLION,
        "cache_read": 0,
        "cache_write": 0,
        "cost_usd": 18.0,
        "priced": True,
    }


def test_costs_accumulate_without_float_drift(registry: MetricsRegistry) -> None:
    for _ in range(10):
        registry.record_success("claude-3-haiku", usage(100_000, 0), Timing(total=0.1))
    # 10 x 0.1 M x $0.25 -- binary floats would give 0.25000000000000006
    assert registry.statistics().cost_usd == Decimal("0.25")
    assert registry.snapshot()["cost"]["estimated_cost_usd"] == 0.25


def test_cache_tokens_are_counted_and_priced_at_their_rates(registry: MetricsRegistry) -> None:
    registry.record_success(
        "claude-haiku-4-5",
        usage(
            0,
            0,
            cache_read_input_tokens=MILLION,
            cache_creation_input_tokens=3 * MILLION,
            cache_creation={
                "ephemeral_5m_input_tokens": MILLION,
                "ephemeral_1h_input_tokens": 2 * MILLION,
            },
        ),
        Timing(total=0.5),
    )
    snap = registry.snapshot()
    assert snap["tokens"] == {
        "input": 0,
        "output": 0,
        "cache_read": MILLION,
        "cache_write": 3 * MILLION,
        "total": 4 * MILLION,
    }
    # 0.10 (read) + 1.25 (5m write) + 2 x 2 (1h write)
    assert snap["cost"]["estimated_cost_usd"] == 5.35


def test_unknown_model_goes_to_the_unpriced_bucket(registry: MetricsRegistry) -> None:
    registry.record_success(SONNET, usage(MILLION, 0), Timing(total=0.2))
    registry.record_success("gpt-4o", usage(500, 70, cache_read_input_tokens=30), Timing(total=0.2))
    snap = registry.snapshot()
    cost = snap["cost"]
    assert cost["estimated_cost_usd"] == 3.0  # the priced part only, never a silent zero
    assert cost["estimate_complete"] is False
    assert cost["unpriced"] == {
        "requests": 1,
        "input_tokens": 500,
        "output_tokens": 70,
        "cache_read_tokens": 30,
        "cache_write_tokens": 0,
    }
    assert "gpt-4o" not in cost["by_model"]
    assert snap["by_model"]["gpt-4o"]["priced"] is False
    assert snap["by_model"]["gpt-4o"]["cost_usd"] == 0.0
    # tokens count all traffic; unpriced says which part of it has no price
    assert snap["tokens"]["input"] == MILLION + 500
    assert snap["requests"]["success"] == 2


# -- errors and rejections --------------------------------------------------------------------


def test_errors_record_latency_but_no_tokens_or_cost(pricing: PriceTable) -> None:
    registry = MetricsRegistry(window=1024, pricing=pricing, known_model=lambda m: m == SONNET)
    registry.record_error(SONNET, 529, Timing(total=0.3, upstream=0.25))
    registry.record_error(None, 400, Timing(total=0.001))
    snap = registry.snapshot()
    assert snap["requests"] == {
        "total": 2,
        "success": 0,
        "error": 2,
        "stream": 0,
        "by_status": {"400": 1, "529": 1},
    }
    assert snap["latency"]["sample_count"] == 2
    assert snap["latency"]["max_ms"] == 300.0
    assert snap["tokens"]["total"] == 0
    assert snap["cost"]["estimated_cost_usd"] == 0.0
    assert snap["cost"]["estimate_complete"] is True
    assert snap["by_model"][SONNET]["errors"] == 1
    assert snap["by_model"]["(none)"]["requests"] == 1


def test_a_stream_that_broke_off_counts_the_usage_reported_before(
    registry: MetricsRegistry,
) -> None:
    registry.record_error(
        SONNET, 499, Timing(total=1.0), stream=True, usage={"input_tokens": 1_000_000}
    )
    snap = registry.snapshot()
    assert snap["requests"]["error"] == 1
    assert snap["tokens"]["input"] == 1_000_000
    assert snap["cost"]["estimated_cost_usd"] == 3.0
    assert snap["by_model"][SONNET]["cost_usd"] == 3.0


def test_rejected_requests_stay_out_of_totals_and_latency(registry: MetricsRegistry) -> None:
    registry.record_success(SONNET, usage(1, 1), Timing(total=2.0))
    for reason in ("queue_full", "queue_full", "queue_timeout", "shutdown"):
        registry.record_rejected(reason)
    snap = registry.snapshot()
    assert snap["rejected"] == {
        "total": 4,
        "by_reason": {"queue_full": 2, "queue_timeout": 1, "shutdown": 1},
    }
    assert snap["requests"]["total"] == 1
    assert snap["latency"]["sample_count"] == 1
    assert snap["latency"]["p50_ms"] == 2000.0
    assert registry.statistics().histograms["request"].count == 1


# -- windows, gauges, timing ------------------------------------------------------------------


def test_flushed_windows_are_counted_by_reason_with_mean_size(registry: MetricsRegistry) -> None:
    registry.record_window(8, "size")
    registry.record_window(3, "time")
    registry.record_window(1, "time")
    registry.record_window(2, "drain")
    assert registry.snapshot()["windows"] == {
        "flushed": 4,
        "by_reason": {"size": 1, "time": 2, "drain": 1},
        "mean_size": 3.5,
    }


def test_gauges_are_reported_as_given(registry: MetricsRegistry) -> None:
    gauges = Gauges(active=5, waiting=2, upstream_in_flight=3, upstream_cap=4, trio_tasks=9)
    snap = registry.snapshot(gauges)
    assert snap["concurrency"] == {
        "active": 5,
        "waiting": 2,
        "upstream_in_flight": 3,
        "upstream_cap": 4,
        "trio_tasks": 9,
    }


def test_each_timing_part_has_its_own_window(registry: MetricsRegistry) -> None:
    registry.record_success(
        SONNET,
        usage(),
        Timing(total=1.0, queue=0.2, upstream_ttfb=0.3, ttft=0.55, upstream=0.7),
        stream=True,
    )
    registry.record_success(SONNET, usage(), Timing(total=0.5, queue=0.1, upstream=0.3))
    registry.record_error(SONNET, 400, Timing(total=2.0))
    snap = registry.snapshot()
    timing = snap["timing"]
    assert snap["requests"]["stream"] == 1
    assert timing["ttft_ms"] == {
        "p50": 550.0,
        "p95": 550.0,
        "p99": 550.0,
        "max": 550.0,
        "sample_count": 1,
    }
    assert timing["upstream_ttfb_ms"]["sample_count"] == 1
    assert timing["upstream_ms"]["sample_count"] == 2
    assert timing["upstream_ms"]["max"] == 700.0
    assert timing["queue_ms"]["sample_count"] == 3
    assert timing["queue_ms"]["max"] == 200.0
    assert timing["overhead_ms"]["sample_count"] == 3
    assert timing["overhead_ms"]["p50"] == 100.0  # 1.0 - 0.2 - 0.7 and 0.5 - 0.1 - 0.3
    assert timing["overhead_ms"]["max"] == 2000.0  # the error: no queue, no upstream


def test_all_time_histograms_use_prometheus_le_buckets(pricing: PriceTable) -> None:
    registry = MetricsRegistry(window=1, pricing=pricing)
    for seconds in (0.025, 0.026, 1000.0):
        registry.record_error(SONNET, 500, Timing(total=seconds))
    hist = registry.statistics().histograms["request"]
    assert hist.bounds == LATENCY_BUCKETS
    assert hist.count == 3  # all time, though the window holds one sample
    assert hist.sum == pytest.approx(1000.051)
    assert hist.cumulative[0] == 1  # le=0.025 includes 0.025 itself
    assert hist.cumulative[1] == 2
    assert hist.cumulative[-2] == 2  # le=300
    assert hist.cumulative[-1] == 3  # +Inf


def test_uptime_follows_the_clock(pricing: PriceTable) -> None:
    now = [100.0]
    registry = MetricsRegistry(window=10, pricing=pricing, clock=lambda: now[0])
    now[0] = 112.3456
    assert registry.snapshot()["uptime_s"] == 12.346


# -- bounded model cardinality ----------------------------------------------------------------


def test_model_names_beyond_the_cap_share_one_entry_and_keep_their_price(
    pricing: PriceTable,
) -> None:
    registry = MetricsRegistry(window=10, pricing=pricing, max_models=2)
    registry.record_success(SONNET, usage(MILLION, 0), Timing(total=0.1))
    registry.record_success("junk-1", usage(1, 1), Timing(total=0.1))
    registry.record_success("claude-3-haiku", usage(MILLION, 0), Timing(total=0.1))
    snap = registry.snapshot()
    assert set(snap["by_model"]) == {SONNET, "junk-1", "(other)"}
    assert snap["by_model"]["(other)"]["cost_usd"] == 0.25
    assert snap["by_model"]["(other)"]["priced"] is True
    assert snap["cost"]["estimated_cost_usd"] == 3.25

    registry.record_success("junk-2", usage(1, 1), Timing(total=0.1))
    snap = registry.snapshot()
    assert snap["by_model"]["(other)"]["priced"] is False
    assert snap["cost"]["unpriced"]["requests"] == 2
    assert snap["requests"]["total"] == sum(m["requests"] for m in snap["by_model"].values())


def test_a_name_gets_its_own_entry_once_the_upstream_answers_for_it(
    pricing: PriceTable,
) -> None:
    """Errors for names nobody has seen answered (typos, made-up models) share (other), so
    they cannot use up the entries real models need; known names are shown from the start."""
    registry = MetricsRegistry(
        window=10, pricing=pricing, max_models=2, known_model=lambda m: m == "claude-haiku-4-5"
    )
    for i in range(5):
        registry.record_error(f"no-such-model-{i}", 404, Timing(total=0.01))
    registry.record_error("claude-haiku-4-5", 529, Timing(total=0.01))
    registry.record_error(SONNET, 529, Timing(total=0.01))
    snap = registry.snapshot()
    assert set(snap["by_model"]) == {"(other)", "claude-haiku-4-5"}
    assert snap["by_model"]["(other)"]["errors"] == 6

    registry.record_success(SONNET, usage(MILLION, 0), Timing(total=0.1))
    snap = registry.snapshot()
    assert snap["by_model"][SONNET] == {**snap["by_model"][SONNET], "requests": 1, "errors": 0}
    assert snap["by_model"][SONNET]["cost_usd"] == 3.0
    assert snap["cost"]["estimated_cost_usd"] == 3.0
    assert snap["cost"]["estimate_complete"] is True

    registry.record_error("broken-stream-model", 502, Timing(total=0.1), usage=usage(0, 1))
    assert "broken-stream-model" not in registry.snapshot()["by_model"]  # the cap is reached


def test_a_client_cannot_take_the_reserved_names(pricing: PriceTable) -> None:
    registry = MetricsRegistry(window=10, pricing=pricing, max_models=1)
    registry.record_success("(other)", usage(1, 1), Timing(total=0.1))
    registry.record_success("(none)", usage(1, 1), Timing(total=0.1))
    registry.record_error(None, 400, Timing(total=0.1))
    registry.record_success(SONNET, usage(MILLION, 0), Timing(total=0.1))
    registry.record_success("claude-3-haiku", usage(MILLION, 0), Timing(total=0.1))
    snap = registry.snapshot()
    assert set(snap["by_model"]) == {"(other)", "(none)", SONNET}
    assert snap["by_model"]["(none)"]["requests"] == 1  # only the refused request
    assert snap["by_model"]["(other)"]["requests"] == 3
    assert snap["by_model"]["(other)"]["cost_usd"] == 0.25  # priced per real name
    assert snap["cost"]["estimated_cost_usd"] == 3.25
    assert snap["cost"]["unpriced"]["requests"] == 2


def test_a_broken_stream_of_an_unpriced_model_makes_the_estimate_incomplete(
    registry: MetricsRegistry,
) -> None:
    registry.record_error("claude-opus-4-9", 502, Timing(total=0.1), usage=usage(24, 3))
    snap = registry.snapshot()
    assert snap["cost"]["unpriced"] == {**snap["cost"]["unpriced"], "requests": 1}
    assert snap["cost"]["unpriced"]["input_tokens"] == 24
    assert snap["cost"]["estimate_complete"] is False


# -- Server-Timing ----------------------------------------------------------------------------


def test_server_timing_lists_every_part_in_ms() -> None:
    timing = Timing(total=0.0421, queue=0.0012, upstream_ttfb=0.0105, ttft=0.0152, upstream=0.0401)
    assert timing.server_timing_header() == (
        "queue;dur=1.2, upstream;dur=40.1, ttfb;dur=10.5, ttft;dur=15.2, "
        "overhead;dur=0.8, total;dur=42.1"
    )


def test_server_timing_omits_parts_that_did_not_happen() -> None:
    assert Timing(total=0.5).server_timing_header() == (
        "queue;dur=0.0, overhead;dur=500.0, total;dur=500.0"
    )


def test_server_timing_keeps_at_most_three_decimals() -> None:
    header = Timing(total=1.23456789, queue=0.0001234, upstream=1.0).server_timing_header()
    assert (
        header == "queue;dur=0.123, upstream;dur=1000.0, overhead;dur=234.444, total;dur=1234.568"
    )


def test_overhead_is_never_negative() -> None:
    assert Timing(total=1.0, queue=0.6, upstream=0.6).overhead == 0.0
