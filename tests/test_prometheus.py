from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from trio_batcher.observatory.metrics import LATENCY_BUCKETS, Gauges, MetricsRegistry, Timing
from trio_batcher.observatory.pricing import load_pricing
from trio_batcher.observatory.prometheus import PrometheusExporter
from trio_batcher.upstream.resilience import ResilienceStatistics

SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-3-5-haiku-latest"
GAUGES = Gauges(active=7, waiting=3, upstream_in_flight=4, upstream_cap=5)

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(exporter: PrometheusExporter) -> tuple[Samples, dict[str, str]]:
    """Parse a scrape into sample name -> [(labels, value)], plus family name -> type."""
    body, content_type = exporter.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    samples: Samples = defaultdict(list)
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(body.decode()):
        types[family.name] = family.type
        for sample in family.samples:
            samples[sample.name].append((sample.labels, sample.value))
    return samples, types


def total(samples: Samples, name: str, **match: str) -> float:
    return sum(
        value
        for labels, value in samples[name]
        if all(labels.get(k) == v for k, v in match.items())
    )


def buckets(samples: Samples, name: str) -> dict[str, float]:
    return {labels["le"]: value for labels, value in samples[name + "_bucket"]}


@pytest.fixture
def registry() -> MetricsRegistry:
    return MetricsRegistry(window=4, pricing=load_pricing(None))  # small: histograms are all-time


def record_a_mix(registry: MetricsRegistry) -> None:
    cached: dict[str, Any] = {
        "input_tokens": 100,
        "output_tokens": 40,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 300,
    }
    registry.record_success(SONNET, cached, Timing(total=0.8, queue=0.02, upstream=0.75))
    registry.record_success(
        SONNET,
        {"input_tokens": 10, "output_tokens": 500},
        Timing(total=12.0, queue=0.3, upstream_ttfb=0.4, ttft=0.9, upstream=11.5),
        stream=True,
    )
    registry.record_success(
        HAIKU, {"input_tokens": 7, "output_tokens": 3}, Timing(total=0.025, upstream=0.02)
    )
    registry.record_success(
        "gpt-4o", {"input_tokens": 5, "output_tokens": 5}, Timing(total=0.1, upstream=0.09)
    )
    registry.record_error(SONNET, 529, Timing(total=2.0, queue=0.5, upstream=1.4))
    registry.record_error(None, 400, Timing(total=0.001))
    registry.record_error(HAIKU, 502, Timing(total=400.0, ttft=0.3), stream=True)
    for reason in ("queue_full", "queue_full", "shutdown"):
        registry.record_rejected(reason)
    registry.record_window(4, "size")
    registry.record_window(1, "time")


def test_exposition_agrees_with_the_json_snapshot(registry: MetricsRegistry) -> None:
    record_a_mix(registry)
    exporter = PrometheusExporter(registry, lambda: GAUGES)
    samples, types = scrape(exporter)
    snap = registry.snapshot(GAUGES)

    assert types["trio_batcher_requests"] == "counter"
    assert total(samples, "trio_batcher_requests_total") == snap["requests"]["total"] == 7
    for status, count in snap["requests"]["by_status"].items():
        assert total(samples, "trio_batcher_requests_total", status=status) == count
    for model, row in snap["by_model"].items():
        assert total(samples, "trio_batcher_requests_total", model=model) == row["requests"]
    assert total(samples, "trio_batcher_streamed_requests_total") == snap["requests"]["stream"]

    for kind in ("input", "output", "cache_read", "cache_write"):
        assert total(samples, "trio_batcher_tokens_total", kind=kind) == snap["tokens"][kind]
    assert total(samples, "trio_batcher_tokens_total") == snap["tokens"]["total"]

    assert total(samples, "trio_batcher_cost_usd_total") == pytest.approx(
        snap["cost"]["estimated_cost_usd"], rel=1e-12
    )
    assert total(samples, "trio_batcher_unpriced_requests_total") == 1
    assert snap["cost"]["unpriced"]["requests"] == 1

    for reason, count in snap["rejected"]["by_reason"].items():
        assert total(samples, "trio_batcher_rejected_total", reason=reason) == count
    assert total(samples, "trio_batcher_rejected_total") == snap["rejected"]["total"] == 3
    for reason, count in snap["windows"]["by_reason"].items():
        assert total(samples, "trio_batcher_windows_flushed_total", reason=reason) == count
    assert total(samples, "trio_batcher_windowed_requests_total") == 5

    # Histograms are all-time: they count every request though the JSON window holds 4.
    assert snap["latency"]["sample_count"] == 4
    assert types["trio_batcher_request_duration_seconds"] == "histogram"
    assert total(samples, "trio_batcher_request_duration_seconds_count") == 7
    assert total(samples, "trio_batcher_request_duration_seconds_sum") == pytest.approx(
        0.8 + 12.0 + 0.025 + 0.1 + 2.0 + 0.001 + 400.0
    )
    assert total(samples, "trio_batcher_queue_wait_seconds_count") == 7
    assert total(samples, "trio_batcher_upstream_duration_seconds_count") == 5
    assert total(samples, "trio_batcher_ttft_seconds_count") == 2

    assert total(samples, "trio_batcher_inflight_requests") == snap["concurrency"]["active"]
    assert total(samples, "trio_batcher_waiting_requests") == snap["concurrency"]["waiting"]
    assert total(samples, "trio_batcher_upstream_inflight") == 4
    assert total(samples, "trio_batcher_upstream_concurrency_cap") == 5


def test_tokens_of_a_model_whose_only_requests_broke_are_exported(
    registry: MetricsRegistry,
) -> None:
    """A stream that broke after usage is an error with tokens: JSON and Prometheus agree."""
    broken = {"input_tokens": 5000, "output_tokens": 3}
    registry.record_error("claude-haiku-4-5", 502, Timing(total=0.1), stream=True, usage=broken)
    samples, _ = scrape(PrometheusExporter(registry, lambda: GAUGES))
    snap = registry.snapshot(GAUGES)
    assert total(samples, "trio_batcher_tokens_total", model="claude-haiku-4-5") == 5003
    assert total(samples, "trio_batcher_tokens_total") == snap["tokens"]["total"] == 5003
    assert total(samples, "trio_batcher_cost_usd_total") == pytest.approx(
        snap["cost"]["estimated_cost_usd"]
    )


def test_upstream_retries_failures_and_cooldowns_are_exported(registry: MetricsRegistry) -> None:
    stats = ResilienceStatistics(
        requests=10,
        attempts=14,
        retries=4,
        retries_denied_by_budget=2,
        retries_denied_by_deadline=1,
        shed_by_cooldown=3,
        failures_by_signal={"overloaded": 5, "rate_limited": 2},
        waiting_for_cooldown=1,
        cooldowns_opened=6,
        cooldowns_extended=1,
        cooldown_remaining=2.5,
        ratelimit_holds=1,
        current_limit=None,
        limit_increases=0,
        limit_decreases=0,
    )
    samples, types = scrape(PrometheusExporter(registry, lambda: GAUGES, lambda: stats))
    assert types["trio_batcher_upstream_attempts"] == "counter"
    assert total(samples, "trio_batcher_upstream_attempts_total") == 14
    assert total(samples, "trio_batcher_upstream_retries_total") == 4
    assert total(samples, "trio_batcher_upstream_retries_denied_total", reason="budget") == 2
    assert total(samples, "trio_batcher_upstream_retries_denied_total", reason="deadline") == 1
    assert total(samples, "trio_batcher_upstream_failures_total", signal="overloaded") == 5
    assert total(samples, "trio_batcher_upstream_failures_total") == 7
    assert total(samples, "trio_batcher_upstream_cooldowns_opened_total") == 6
    assert total(samples, "trio_batcher_upstream_ratelimit_holds_total") == 1
    assert total(samples, "trio_batcher_upstream_cooldown_remaining_seconds") == 2.5
    assert types["trio_batcher_upstream_cooldown_remaining_seconds"] == "gauge"


def test_histogram_buckets_are_cumulative_seconds_with_le_semantics(
    registry: MetricsRegistry,
) -> None:
    record_a_mix(registry)
    samples, _ = scrape(PrometheusExporter(registry, lambda: GAUGES))
    request = buckets(samples, "trio_batcher_request_duration_seconds")
    assert list(request) == [repr(b) for b in LATENCY_BUCKETS] + ["+Inf"]
    # durations: 0.001, 0.025, 0.1, 0.8, 2.0, 12.0, 400.0
    assert request["0.025"] == 2  # 0.025 sits in its own bucket
    assert request["0.1"] == 3
    assert request["1.0"] == 4
    assert request["2.5"] == 5
    assert request["20.0"] == 6
    assert request["300.0"] == 6
    assert request["+Inf"] == 7
    assert list(request.values()) == sorted(request.values())

    ttft = buckets(samples, "trio_batcher_ttft_seconds")
    assert (ttft["0.25"], ttft["0.5"], ttft["1.0"]) == (0, 1, 2)


def test_counters_move_between_scrapes_because_they_are_read_at_scrape_time(
    registry: MetricsRegistry,
) -> None:
    exporter = PrometheusExporter(registry, lambda: GAUGES)
    before, _ = scrape(exporter)
    assert total(before, "trio_batcher_requests_total") == 0
    assert total(before, "trio_batcher_request_duration_seconds_count") == 0
    registry.record_success(SONNET, {"input_tokens": 1}, Timing(total=0.2))
    after, _ = scrape(exporter)
    assert total(after, "trio_batcher_requests_total", model=SONNET, status="200") == 1
    assert total(after, "trio_batcher_request_duration_seconds_count") == 1


def test_gauges_are_read_on_every_scrape_and_an_absent_cap_is_omitted(
    registry: MetricsRegistry,
) -> None:
    current = [GAUGES]
    exporter = PrometheusExporter(registry, lambda: current[0])
    samples, _ = scrape(exporter)
    assert total(samples, "trio_batcher_inflight_requests") == 7
    current[0] = Gauges(active=1, waiting=0, upstream_in_flight=1, upstream_cap=None)
    samples, _ = scrape(exporter)
    assert total(samples, "trio_batcher_inflight_requests") == 1
    assert "trio_batcher_upstream_concurrency_cap" not in samples


def test_each_exporter_has_a_private_registry(registry: MetricsRegistry) -> None:
    other = MetricsRegistry(window=4, pricing=load_pricing(None))
    registry.record_success(SONNET, {}, Timing(total=0.1))
    first = PrometheusExporter(registry, lambda: GAUGES)
    second = PrometheusExporter(other, lambda: GAUGES)  # no duplicate-series error
    assert total(scrape(first)[0], "trio_batcher_requests_total") == 1
    assert total(scrape(second)[0], "trio_batcher_requests_total") == 0
    global_names = {family.name for family in REGISTRY.collect()}
    assert not any(name.startswith("trio_batcher_") for name in global_names)


def test_openmetrics_is_served_when_the_scraper_asks_for_it(registry: MetricsRegistry) -> None:
    record_a_mix(registry)
    exporter = PrometheusExporter(registry, lambda: GAUGES)
    body, content_type = exporter.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    parsed = openmetrics_families(body.decode())  # type: ignore[no-untyped-call]
    families = {f.name: f for f in parsed}
    requests = families["trio_batcher_requests"]
    assert sum(s.value for s in requests.samples if s.name.endswith("_total")) == 7
    assert exporter.render("text/plain")[1].startswith("text/plain; version=0.0.4")


# -- per tenant ---------------------------------------------------------------------------------


def record_tenants(registry: MetricsRegistry) -> None:
    cheap = {"input_tokens": 10, "output_tokens": 20}
    registry.record_success(SONNET, cheap, Timing(total=0.2, queue=0.01, upstream=0.15), tenant="a")
    registry.record_success(
        HAIKU,
        {"input_tokens": 5, "output_tokens": 5, "cache_read_input_tokens": 100},
        Timing(total=1.5, queue=0.5, upstream_ttfb=0.2, ttft=0.7, upstream=0.9),
        stream=True,
        tenant="b",
    )
    registry.record_success("gpt-4o", cheap, Timing(total=0.1, upstream=0.05), tenant="b")
    registry.record_error(SONNET, 529, Timing(total=0.3, upstream=0.2), tenant="a")
    registry.record_error(None, 400, Timing(total=0.001))
    for reason, tenant in (
        ("tenant_queue_full", "a"),
        ("tenant_queue_full", "a"),
        ("rate_limited", "b"),
        ("insufficient_quota", "b"),
        ("queue_full", None),
    ):
        registry.record_rejected(reason, tenant=tenant)


def test_tenant_families_agree_with_by_tenant() -> None:
    registry = MetricsRegistry(
        window=4, pricing=load_pricing(None), known_tenants=lambda: frozenset("ab")
    )
    record_tenants(registry)
    samples, types = scrape(PrometheusExporter(registry, lambda: GAUGES))
    snap = registry.snapshot(GAUGES)
    assert set(snap["by_tenant"]) == {"a", "b", "(other)"}

    assert types["trio_batcher_tenant_requests"] == "counter"
    assert types["trio_batcher_tenant_rejected"] == "counter"
    assert types["trio_batcher_tenant_duration_seconds"] == "histogram"
    for tenant, row in snap["by_tenant"].items():
        for status, count in row["requests"]["by_status"].items():
            got = total(samples, "trio_batcher_tenant_requests_total", tenant=tenant, status=status)
            assert got == count, (tenant, status)
        for reason, count in row["shed"]["by_reason"].items():
            got = total(samples, "trio_batcher_tenant_rejected_total", tenant=tenant, reason=reason)
            assert got == count, (tenant, reason)
        for kind, count in row["tokens"].items():
            assert total(samples, "trio_batcher_tenant_tokens_total", tenant=tenant, kind=kind) == (
                count
            )
        assert total(samples, "trio_batcher_tenant_cost_usd_total", tenant=tenant) == (
            pytest.approx(row["estimated_cost_usd"], rel=1e-12)
        )
        assert (
            total(samples, "trio_batcher_tenant_unpriced_requests_total", tenant=tenant)
            == (row["unpriced_requests"])
        )
        for part in ("total", "queue", "upstream_ttfb", "ttft", "upstream", "overhead"):
            count = total(
                samples, "trio_batcher_tenant_duration_seconds_count", tenant=tenant, part=part
            )
            assert count >= row["timing"][f"{part}_ms"]["sample_count"], (tenant, part)
    # The tenant breakdown covers every request and every shed one, once.
    assert total(samples, "trio_batcher_tenant_requests_total") == total(
        samples, "trio_batcher_requests_total"
    )
    assert total(samples, "trio_batcher_tenant_rejected_total") == total(
        samples, "trio_batcher_rejected_total"
    )
    assert total(samples, "trio_batcher_tenant_cost_usd_total") == pytest.approx(
        total(samples, "trio_batcher_cost_usd_total"), rel=1e-12
    )
    assert total(samples, "trio_batcher_tenant_unpriced_requests_total", tenant="b") == 1
    b = {
        labels["le"]: value
        for labels, value in samples["trio_batcher_tenant_duration_seconds_bucket"]
        if labels["tenant"] == "b" and labels["part"] == "ttft"
    }
    assert (b["0.5"], b["1.0"], b["+Inf"]) == (0, 1, 1)


def test_tenant_label_values_are_only_configured_names_and_other() -> None:
    registry = MetricsRegistry(
        window=4, pricing=load_pricing(None), known_tenants=lambda: frozenset({"team-a"})
    )
    registry.record_success(SONNET, {"output_tokens": 1}, Timing(total=0.1), tenant="team-a")
    for i in range(200):  # strings nobody configured: a bug upstream must not explode labels
        registry.record_success(SONNET, {}, Timing(total=0.1), tenant=f"sk-proxy-key-{i}")
        registry.record_rejected("rate_limited", tenant=f"sk-proxy-key-{i}")
    body, _ = PrometheusExporter(registry, lambda: GAUGES).render()
    samples, _ = scrape(PrometheusExporter(registry, lambda: GAUGES))
    labels = {
        labels["tenant"]
        for name, rows in samples.items()
        if name.startswith("trio_batcher_tenant_")
        for labels, _ in rows
    }
    assert labels == {"team-a", "(other)"}
    assert b"sk-proxy-key" not in body
    assert total(samples, "trio_batcher_tenant_requests_total", tenant="(other)") == 200
    assert total(samples, "trio_batcher_tenant_rejected_total", tenant="(other)") == 200


def test_without_tenants_the_tenant_families_hold_one_other_series(
    registry: MetricsRegistry,
) -> None:
    record_a_mix(registry)
    samples, _ = scrape(PrometheusExporter(registry, lambda: GAUGES))
    tenants = {labels["tenant"] for labels, _ in samples["trio_batcher_tenant_requests_total"]}
    assert tenants == {"(other)"}
    assert total(samples, "trio_batcher_tenant_requests_total") == 7
    assert total(samples, "trio_batcher_tenant_rejected_total", tenant="(other)") == 3


def record_upstreams(registry: MetricsRegistry) -> None:
    cached = {"input_tokens": 100, "output_tokens": 40, "cache_read_input_tokens": 900}
    registry.record_success(SONNET, cached, Timing(total=0.3, upstream=0.2), upstream="main")
    registry.record_success(
        SONNET,
        {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 50},
        Timing(total=0.6, upstream_ttfb=0.1, upstream=0.5),
        upstream="bedrock-eu",
    )
    registry.record_success(
        "claude-unknown-9", {"output_tokens": 1}, Timing(total=0.1), upstream="main"
    )
    registry.record_error(SONNET, 529, Timing(total=0.2, upstream=0.1), upstream="bedrock-eu")
    registry.record_error(None, 400, Timing(total=0.001))  # never routed
    for upstream, outcome in [
        ("bedrock-eu", "overloaded"),
        ("main", "ok"),
        ("main", "ok"),
        ("bedrock-eu", "ok"),
        ("bedrock-eu", "overloaded"),
    ]:
        registry.record_attempt(upstream, outcome)
    registry.record_failover("bedrock-eu", "main", "overloaded")
    registry.record_failover("bedrock-eu", "main", "connect_error")
    registry.record_spill("main", "bedrock-eu", "full")
    registry.record_spill("main", "bedrock-eu", "cooling")
    registry.record_spill("main", "bedrock-eu", "full")
    for kept in (True, True, False):
        registry.record_affinity(kept)


def test_upstream_families_agree_with_by_upstream() -> None:
    registry = MetricsRegistry(
        window=4, pricing=load_pricing(None), known_upstreams=lambda: ("main", "bedrock-eu")
    )
    record_upstreams(registry)
    samples, types = scrape(PrometheusExporter(registry, lambda: GAUGES))
    snap = registry.snapshot(GAUGES)
    assert set(snap["by_upstream"]) == {"main", "bedrock-eu"}

    assert types["trio_batcher_routed_requests"] == "counter"
    assert types["trio_batcher_routed_duration_seconds"] == "histogram"
    assert types["trio_batcher_routed_attempts"] == "counter"
    # The resilience families keep their names and their (absent) labels.
    assert "trio_batcher_upstream_duration_seconds_count" in samples
    for upstream, row in snap["by_upstream"].items():
        got = total(samples, "trio_batcher_routed_requests_total", upstream=upstream)
        assert got == row["requests"]
        for status, count in row["errors_by_status"].items():
            assert (
                total(
                    samples, "trio_batcher_routed_requests_total", upstream=upstream, status=status
                )
                == count
            )
        for kind, count in row["tokens"].items():
            got = total(samples, "trio_batcher_routed_tokens_total", upstream=upstream, kind=kind)
            assert got == count, (upstream, kind)
        assert total(samples, "trio_batcher_routed_cost_usd_total", upstream=upstream) == (
            pytest.approx(row["cost_usd"], rel=1e-12)
        )
        assert (
            total(samples, "trio_batcher_routed_unpriced_requests_total", upstream=upstream)
            == (row["unpriced_requests"])
        )
        for outcome, count in row["attempts_by_outcome"].items():
            got = total(
                samples, "trio_batcher_routed_attempts_total", upstream=upstream, outcome=outcome
            )
            assert got == count
        for part in ("total", "queue", "upstream_ttfb", "ttft", "upstream", "overhead"):
            count = total(
                samples, "trio_batcher_routed_duration_seconds_count", upstream=upstream, part=part
            )
            assert count >= row["timing"].get(f"{part}_ms", row["latency"])["sample_count"]
    assert total(samples, "trio_batcher_routed_tokens_total", kind="cache_read") == 900
    assert total(samples, "trio_batcher_routed_tokens_total", kind="cache_write") == 50
    assert total(samples, "trio_batcher_routed_requests_total") == 4  # the 400 was not routed
    assert total(samples, "trio_batcher_routed_attempts_total", outcome="overloaded") == 2
    assert total(samples, "trio_batcher_routed_unpriced_requests_total", upstream="main") == 1
    ttfb = total(
        samples,
        "trio_batcher_routed_duration_seconds_count",
        upstream="bedrock-eu",
        part="upstream_ttfb",
    )
    assert ttfb == 1


def test_failovers_spills_and_affinity_are_exported() -> None:
    registry = MetricsRegistry(window=4, pricing=load_pricing(None))
    record_upstreams(registry)
    samples, types = scrape(PrometheusExporter(registry, lambda: GAUGES))
    routing = registry.snapshot(GAUGES)["routing"]
    for name in ("failovers", "spills", "affinity_turns", "failover_paths", "spill_paths"):
        assert types["trio_batcher_" + name] == "counter"
    for cause, count in routing["failovers_by_cause"].items():
        assert total(samples, "trio_batcher_failovers_total", cause=cause) == count
    for cause, count in routing["spills_by_cause"].items():
        assert total(samples, "trio_batcher_spills_total", cause=cause) == count
    assert total(samples, "trio_batcher_failovers_total") == 2
    assert total(samples, "trio_batcher_spills_total", cause="full") == 2
    assert (
        total(
            samples,
            "trio_batcher_failover_paths_total",
            from_upstream="bedrock-eu",
            to_upstream="main",
        )
        == 2
    )
    assert (
        total(samples, "trio_batcher_spill_paths_total", preferred="main", to_upstream="bedrock-eu")
        == 3
    )
    assert total(samples, "trio_batcher_affinity_turns_total", kept="true") == 2
    assert total(samples, "trio_batcher_affinity_turns_total", kept="false") == 1


def test_without_routing_the_affinity_series_are_zero_and_there_is_no_upstream_series(
    registry: MetricsRegistry,
) -> None:
    record_a_mix(registry)  # callers that name no upstream
    samples, _ = scrape(PrometheusExporter(registry, lambda: GAUGES))
    assert samples["trio_batcher_routed_requests_total"] == []
    assert samples["trio_batcher_failovers_total"] == []
    assert total(samples, "trio_batcher_affinity_turns_total") == 0
    assert len(samples["trio_batcher_affinity_turns_total"]) == 2


def test_every_family_served_is_in_the_docs_table_with_its_labels() -> None:
    """docs/metrics.md lists each family the exporter serves, in a row naming its labels."""
    registry = MetricsRegistry(window=4, pricing=load_pricing(None))
    record_a_mix(registry)
    record_upstreams(registry)
    stats = ResilienceStatistics(
        requests=1,
        attempts=1,
        retries=0,
        retries_denied_by_budget=0,
        retries_denied_by_deadline=0,
        shed_by_cooldown=0,
        failures_by_signal={"overloaded": 1},
        waiting_for_cooldown=0,
        cooldowns_opened=0,
        cooldowns_extended=0,
        cooldown_remaining=0.0,
        ratelimit_holds=0,
        current_limit=None,
        limit_increases=0,
        limit_decreases=0,
    )
    body, _ = PrometheusExporter(registry, lambda: GAUGES, lambda: stats).render()
    doc = (Path(__file__).parent.parent / "docs" / "metrics.md").read_text()
    rows = {line.split("`")[1]: line for line in doc.splitlines() if line.startswith("| `trio_")}
    undocumented = []
    for family in text_string_to_metric_families(body.decode()):
        name = family.name + ("_total" if family.type == "counter" else "")
        row = rows.get(name)
        labels = {k for sample in family.samples for k in sample.labels} - {"le"}
        if row is None or any(f"`{label}`" not in row for label in labels):
            undocumented.append((name, sorted(labels)))
    assert undocumented == []
