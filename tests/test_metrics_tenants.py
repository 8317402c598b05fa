"""The registry per tenant (``by_tenant``): bounded names, one ``(other)`` entry for every
unknown or absent tenant, shedding by reason, cost priced as ``by_model`` prices it, and the
timing split over the same bounded window; and over loopback, that a tenant's key reads
only its own figures (``METRICS_TOKEN`` the whole view)."""

from __future__ import annotations

import json
from collections.abc import Collection
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import proxy_settings, running_proxy, running_simulator

from trio_batcher.observatory.metrics import OTHER_TENANTS, Gauges, MetricsRegistry, Timing
from trio_batcher.observatory.pricing import PriceTable, TokenUsage, load_pricing
from trio_batcher.observatory.prometheus import PrometheusExporter
from trio_batcher.tenants import hash_key

SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-3-5-haiku-latest"
TENANTS = frozenset({"team-a", "team-b"})


@pytest.fixture(scope="module")
def pricing() -> PriceTable:
    return load_pricing(None)


@pytest.fixture
def registry(pricing: PriceTable) -> MetricsRegistry:
    return MetricsRegistry(window=1024, pricing=pricing, known_tenants=lambda: TENANTS)


def usage(inp: int = 0, out: int = 0, **extra: Any) -> dict[str, Any]:
    return {"input_tokens": inp, "output_tokens": out, **extra}


def test_a_configured_tenant_gets_its_own_entry_with_requests_tokens_and_cost(
    registry: MetricsRegistry, pricing: PriceTable
) -> None:
    cached = usage(1000, 200, cache_read_input_tokens=5000, cache_creation_input_tokens=300)
    registry.record_success(SONNET, cached, Timing(total=1.0, queue=0.1, upstream=0.8))
    registry.record_success(
        SONNET,
        usage(10, 500),
        Timing(total=2.0, queue=0.2, upstream_ttfb=0.3, ttft=0.4, upstream=1.7),
        stream=True,
        tenant="team-a",
    )
    registry.record_error(SONNET, 529, Timing(total=0.5, upstream=0.4), tenant="team-a")
    snap = registry.snapshot()
    json.dumps(snap)

    assert set(snap["by_tenant"]) == {"team-a", OTHER_TENANTS}
    a = snap["by_tenant"]["team-a"]
    assert a["requests"] == {
        "total": 2,
        "success": 1,
        "error": 1,
        "stream": 1,
        "by_status": {"200": 1, "529": 1},
    }
    assert a["tokens"] == {"input": 10, "output": 500, "cache_read": 0, "cache_write": 0}
    expected = pricing.cost(SONNET, TokenUsage(input=10, output=500))
    assert expected is not None
    assert a["estimated_cost_usd"] == float(expected)
    assert a["estimate_complete"] is True
    assert a["shed"] == {"total": 0, "by_reason": {}}
    assert a["timing"]["total_ms"]["p50"] == 500.0  # rank round(0.5) = 0 of [0.5, 2.0]
    assert a["timing"]["total_ms"]["max"] == 2000.0
    assert a["timing"]["ttft_ms"] == {
        "p50": 400.0,
        "p95": 400.0,
        "p99": 400.0,
        "max": 400.0,
        "sample_count": 1,
    }
    assert a["timing"]["upstream_ttfb_ms"]["sample_count"] == 1
    assert a["timing"]["upstream_ms"]["sample_count"] == 2
    assert a["timing"]["queue_ms"]["max"] == 200.0
    assert a["timing"]["overhead_ms"]["sample_count"] == 2
    # The request without a tenant is the (other) entry's.
    other = snap["by_tenant"][OTHER_TENANTS]
    assert other["requests"]["total"] == 1
    assert other["tokens"]["cache_read"] == 5000


def test_unknown_and_absent_tenants_share_the_one_other_entry(
    registry: MetricsRegistry,
) -> None:
    for i in range(500):
        registry.record_success(SONNET, usage(1, 1), Timing(total=0.01), tenant=f"stranger-{i}")
    registry.record_error(None, 401, Timing(total=0.001))
    registry.record_rejected("queue_full", tenant="sk-ant-not-a-tenant-name")
    snap = registry.snapshot()
    assert list(snap["by_tenant"]) == [OTHER_TENANTS]
    other = snap["by_tenant"][OTHER_TENANTS]
    assert other["requests"]["total"] == 501
    assert other["shed"] == {"total": 1, "by_reason": {"queue_full": 1}}
    assert "sk-ant-not-a-tenant-name" not in json.dumps(snap)
    assert "stranger-0" not in json.dumps(snap)


def test_without_configured_tenants_everything_is_other_and_the_rest_is_unchanged(
    pricing: PriceTable,
) -> None:
    plain = MetricsRegistry(window=16, pricing=pricing)
    named = MetricsRegistry(window=16, pricing=pricing)
    for registry, tenant in ((plain, None), (named, "team-a")):
        registry.record_success(SONNET, usage(100, 10), Timing(total=0.2), surface="openai.chat")
        registry.record_error(HAIKU, 502, Timing(total=0.3), usage=usage(5, 5), tenant=tenant)
        registry.record_rejected("shutdown", tenant=tenant)
    a, b = plain.snapshot(), named.snapshot()
    assert list(a["by_tenant"]) == list(b["by_tenant"]) == [OTHER_TENANTS]
    for key in a:
        if key not in ("started_at", "uptime_s"):
            assert a[key] == b[key], key


def test_by_tenant_adds_up_to_the_totals(registry: MetricsRegistry) -> None:
    for i in range(30):
        tenant = ("team-a", "team-b", None, "who")[i % 4]
        model = (SONNET, HAIKU, "claude-unpriced-test")[i % 3]
        if i % 5 == 0:
            registry.record_error(model, 504, Timing(total=0.1), tenant=tenant)
        else:
            registry.record_success(model, usage(i, 2 * i), Timing(total=0.1), tenant=tenant)
        if i % 7 == 0:
            registry.record_rejected("rate_limited", tenant=tenant)
    snap = registry.snapshot()
    stats = registry.statistics()
    tenants = snap["by_tenant"].values()
    assert sum(t["requests"]["total"] for t in tenants) == snap["requests"]["total"]
    assert sum(t["requests"]["error"] for t in tenants) == snap["requests"]["error"]
    assert sum(t["shed"]["total"] for t in tenants) == snap["rejected"]["total"]
    for kind in ("input", "output", "cache_read", "cache_write"):
        assert sum(t["tokens"][kind] for t in tenants) == snap["tokens"][kind]
    # Exactly, in Decimal: the same per-request cost goes to the model and to the tenant.
    assert sum((t.finished.cost_usd for t in stats.by_tenant.values()), Decimal(0)) == (
        stats.cost_usd
    )
    assert sum(t.finished.unpriced_requests for t in stats.by_tenant.values()) == (
        stats.unpriced_requests
    )


def test_shed_requests_are_counted_per_tenant_by_reason_outside_requests_and_latency(
    registry: MetricsRegistry,
) -> None:
    for reason in ("tenant_queue_full", "tenant_queue_full", "rate_limited"):
        registry.record_rejected(reason, tenant="team-a")
    registry.record_rejected("insufficient_quota", tenant="team-b")
    registry.record_rejected("queue_full")
    snap = registry.snapshot()
    by_tenant = snap["by_tenant"]
    assert by_tenant["team-a"]["shed"] == {
        "total": 3,
        "by_reason": {"rate_limited": 1, "tenant_queue_full": 2},
    }
    assert by_tenant["team-b"]["shed"] == {"total": 1, "by_reason": {"insufficient_quota": 1}}
    assert by_tenant[OTHER_TENANTS]["shed"]["by_reason"] == {"queue_full": 1}
    assert snap["rejected"]["by_reason"] == {
        "insufficient_quota": 1,
        "queue_full": 1,
        "rate_limited": 1,
        "tenant_queue_full": 2,
    }
    for entry in by_tenant.values():
        assert entry["requests"]["total"] == 0
        assert entry["timing"]["total_ms"]["sample_count"] == 0
    assert snap["requests"]["total"] == 0


def test_a_tenant_is_priced_per_model_and_an_unpriced_model_marks_only_its_estimate(
    registry: MetricsRegistry, pricing: PriceTable
) -> None:
    registry.record_success(SONNET, usage(1_000_000, 0), Timing(total=0.1), tenant="team-a")
    registry.record_success(HAIKU, usage(0, 1_000_000), Timing(total=0.1), tenant="team-a")
    registry.record_success("claude-unpriced-test", usage(9, 9), Timing(total=0.1), tenant="team-b")
    # A stream that broke after usage is charged too, as by_model charges it.
    registry.record_error(SONNET, 499, Timing(total=0.1), usage=usage(0, 1000), tenant="team-b")
    by_tenant = registry.statistics().by_tenant
    sonnet, haiku = pricing.price_for(SONNET), pricing.price_for(HAIKU)
    assert sonnet is not None and haiku is not None
    assert by_tenant["team-a"].finished.cost_usd == sonnet.input + haiku.output
    assert by_tenant["team-b"].finished.cost_usd == sonnet.output * 1000 / 1_000_000
    assert by_tenant["team-b"].finished.input_tokens == 9
    snap = registry.snapshot()["by_tenant"]
    assert snap["team-a"]["estimate_complete"] is True
    assert snap["team-b"]["estimate_complete"] is False
    assert snap["team-b"]["unpriced_requests"] == 1


def test_a_reload_that_adds_a_tenant_is_seen_and_a_dropped_one_keeps_its_entry(
    pricing: PriceTable,
) -> None:
    configured: set[str] = {"team-a"}
    registry = MetricsRegistry(window=8, pricing=pricing, known_tenants=lambda: configured)
    registry.record_success(SONNET, usage(1, 1), Timing(total=0.1), tenant="team-a")
    registry.record_success(SONNET, usage(1, 1), Timing(total=0.1), tenant="team-c")
    configured.add("team-c")  # the tenants file was reloaded with a new tenant
    registry.record_success(SONNET, usage(1, 1), Timing(total=0.1), tenant="team-c")
    configured.discard("team-a")  # ... and again without team-a
    registry.record_success(SONNET, usage(1, 1), Timing(total=0.1), tenant="team-a")
    by_tenant = registry.snapshot()["by_tenant"]
    assert {name: t["requests"]["total"] for name, t in by_tenant.items()} == {
        OTHER_TENANTS: 1,
        "team-a": 2,
        "team-c": 1,
    }


def test_the_known_tenants_setter_bounds_names_from_then_on(pricing: PriceTable) -> None:
    registry = MetricsRegistry(window=8, pricing=pricing)  # built before the tenants are read
    registry.record_rejected("rate_limited", tenant="team-a")
    registry.known_tenants = lambda: ("team-a",)
    registry.record_rejected("rate_limited", tenant="team-a")
    by_tenant = registry.snapshot()["by_tenant"]
    assert by_tenant["team-a"]["shed"]["total"] == 1
    assert by_tenant[OTHER_TENANTS]["shed"]["total"] == 1


def test_named_entries_stop_at_max_tenants_and_the_rest_share_other(pricing: PriceTable) -> None:
    names = [f"t{i}" for i in range(5)]
    registry = MetricsRegistry(
        window=8, pricing=pricing, known_tenants=lambda: names, max_tenants=2
    )
    for name in names:
        registry.record_success(SONNET, usage(1, 1), Timing(total=0.1), tenant=name)
    by_tenant = registry.snapshot()["by_tenant"]
    assert {name: t["requests"]["total"] for name, t in by_tenant.items()} == {
        "t0": 1,
        "t1": 1,
        OTHER_TENANTS: 3,
    }


def test_no_configured_name_can_pose_as_the_shared_entry(pricing: PriceTable) -> None:
    registry = MetricsRegistry(
        window=8, pricing=pricing, known_tenants=lambda: {OTHER_TENANTS}, max_tenants=1
    )
    registry.record_success(SONNET, usage(1, 1), Timing(total=0.1), tenant=OTHER_TENANTS)
    registry.record_success(SONNET, usage(1, 1), Timing(total=0.1), tenant="team-a")
    registry.record_success(SONNET, usage(1, 1), Timing(total=0.1))
    assert registry.snapshot()["by_tenant"][OTHER_TENANTS]["requests"]["total"] == 3


def test_known_tenants_is_asked_only_for_a_name_without_an_entry(pricing: PriceTable) -> None:
    calls: list[int] = []

    def known() -> Collection[str]:
        calls.append(1)
        return TENANTS

    registry = MetricsRegistry(window=8, pricing=pricing, known_tenants=known)
    for _ in range(10):
        registry.record_success(SONNET, usage(1, 1), Timing(total=0.1), tenant="team-a")
        registry.record_success(SONNET, usage(1, 1), Timing(total=0.1))
    assert len(calls) == 1


def test_a_tenants_latency_window_is_bounded_and_its_histograms_are_all_time(
    pricing: PriceTable,
) -> None:
    registry = MetricsRegistry(window=4, pricing=pricing, known_tenants=lambda: TENANTS)
    for i in range(1, 11):
        registry.record_success(
            SONNET, usage(1, 1), Timing(total=i / 10, queue=0.01), tenant="team-a"
        )
    timing = registry.snapshot()["by_tenant"]["team-a"]["timing"]
    assert timing["total_ms"] == {
        "p50": 900.0,  # of the last four (0.7, 0.8, 0.9, 1.0), rank round(1.5) = 2
        "p95": 1000.0,
        "p99": 1000.0,
        "max": 1000.0,
        "sample_count": 4,
    }
    histograms = registry.statistics().by_tenant["team-a"].finished.histograms
    assert list(histograms) == ["total", "queue", "upstream_ttfb", "ttft", "upstream", "overhead"]
    assert histograms["total"].count == 10
    assert histograms["queue"].count == 10
    assert histograms["ttft"].count == 0


def test_a_batchs_usage_is_its_tenants_at_the_batch_price_without_latency_samples(
    registry: MetricsRegistry, pricing: PriceTable
) -> None:
    # What Runtime.record_batch_usage reports once a batch is delivered: the creating
    # tenant's entry gets the requests, tokens and the discounted cost, the same Decimal the
    # model and the surface get, and no timing sample (hours of queueing are not latency).
    half = Decimal("0.5")
    registry.record_offline(
        SONNET, usage(4000, 600), requests=3, surface="openai.batch", price_factor=half
    )
    registry.record_offline(
        SONNET,
        usage(1000, 200),
        requests=2,
        surface="openai.batch",
        price_factor=half,
        tenant="team-a",
    )
    snap = registry.snapshot()
    stats = registry.statistics()
    a = snap["by_tenant"]["team-a"]
    assert a["requests"] == {
        "total": 2,
        "success": 2,
        "error": 0,
        "stream": 0,
        "by_status": {"200": 2},
    }
    assert a["tokens"] == {"input": 1000, "output": 200, "cache_read": 0, "cache_write": 0}
    standard = pricing.cost(SONNET, TokenUsage(input=1000, output=200))
    assert standard is not None
    assert stats.by_tenant["team-a"].finished.cost_usd == standard * half
    assert a["estimate_complete"] is True
    assert all(part["sample_count"] == 0 for part in a["timing"].values())
    # The batch without a tenant (stored before batches kept one) is (other)'s.
    assert snap["by_tenant"][OTHER_TENANTS]["requests"]["by_status"] == {"200": 3}
    # by_tenant still adds up to the totals, cost exactly.
    assert sum(t["requests"]["total"] for t in snap["by_tenant"].values()) == 5
    assert sum((t.finished.cost_usd for t in stats.by_tenant.values()), Decimal(0)) == (
        stats.cost_usd
    )

    body, _ = PrometheusExporter(registry, lambda: Gauges(0, 0, 0, None)).render()
    series = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }
    assert (
        series["trio_batcher_tenant_requests_total", (("status", "200"), ("tenant", "team-a"))] == 2
    )
    assert (
        series["trio_batcher_tenant_tokens_total", (("kind", "output"), ("tenant", "team-a"))]
        == 200
    )
    assert series["trio_batcher_tenant_cost_usd_total", (("tenant", "team-a"),)] == pytest.approx(
        float(standard * half), rel=1e-12
    )


# -- each tenant sees only itself, over loopback ---------------------------------------------

KEYS = {"team-a": "tb-key-of-team-a-0123456789", "team-b": "tb-key-of-team-b-9876543210"}
GATEWAY_WIDE = {"concurrency", "gc", "windows", "by_model", "by_surface", "upstream", "cluster"}


def _tenants_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(
        f'[[tenant]]\nname = "team-a"\nkey_sha256 = ["{hash_key(KEYS["team-a"])}"]\n'
        'models = ["claude-haiku-*"]\n\n'
        f'[[tenant]]\nname = "team-b"\nkey_sha256 = ["{hash_key(KEYS["team-b"])}"]\n'
    )
    return path


def _as(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def _chat(model: str, text: str = "hi") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


async def _traffic(http: httpx2.AsyncClient, url: str) -> None:
    """team-a: two answered, one refused at the door (400), one model it may not use (403);
    team-b: five answered, with longer prompts."""
    chat = f"{url}/v1/chat/completions"
    for _ in range(2):
        reply = await http.post(chat, json=_chat("claude-haiku-4-5"), headers=_as("team-a"))
        assert reply.status_code == 200
    bad = {**_chat("claude-haiku-4-5"), "n": 2}
    assert (await http.post(chat, json=bad, headers=_as("team-a"))).status_code == 400
    refused = await http.post(chat, json=_chat("claude-sonnet-5-5"), headers=_as("team-a"))
    assert refused.status_code == 403
    for i in range(5):
        reply = await http.post(chat, json=_chat(HAIKU, "b " * (50 + i)), headers=_as("team-b"))
        assert reply.status_code == 200


def _series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _assert_only_team_a(document: dict[str, Any], text: str, prometheus: str) -> None:
    assert document["view"] == "tenant" and document["tenant"] == "team-a"
    assert list(document["by_tenant"]) == ["team-a"]
    assert not GATEWAY_WIDE & set(document), "a gateway-wide figure counts other tenants"
    assert "batches" not in document
    assert "team-b" not in text and "(other)" not in text
    # Its own figures, in the sections a dashboard reads: the refused 400 is its own too.
    a = document["by_tenant"]["team-a"]
    assert document["requests"] == a["requests"]
    assert a["requests"]["by_status"] == {"200": 2, "400": 1}
    assert (
        document["rejected"]
        == a["shed"]
        == {
            "total": 1,
            "by_reason": {"model_not_allowed": 1},
        }
    )
    assert document["tokens"]["input"] == a["tokens"]["input"] > 0
    assert document["cost"]["estimated_cost_usd"] == a["estimated_cost_usd"] > 0
    assert document["latency"]["sample_count"] == 3
    series = _series(prometheus)
    assert "team-b" not in prometheus and 'tenant="(other)"' not in prometheus
    assert {name for name, _ in series} - {"trio_batcher_start_time_seconds"} <= {
        name for name, _ in series if name.startswith("trio_batcher_tenant_")
    }
    assert all(dict(labels).get("tenant") in (None, "team-a") for _, labels in series)
    assert series["trio_batcher_tenant_requests_total", (("status", "400"), ("tenant", "team-a"))]
    assert (
        series[
            "trio_batcher_tenant_rejected_total",
            (("reason", "model_not_allowed"), ("tenant", "team-a")),
        ]
        == 1
    )


async def test_a_tenants_key_reads_only_its_own_metrics_and_prometheus(tmp_path: Path) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(
            sim, tenants_file=str(_tenants_file(tmp_path)), metrics_enabled=True
        )
        async with running_proxy(settings) as url, httpx2.AsyncClient(timeout=30) as http:
            await _traffic(http, url)
            own = await http.get(f"{url}/metrics", headers=_as("team-a"))
            scrape = await http.get(f"{url}/metrics/prometheus", headers=_as("team-a"))
            b = (await http.get(f"{url}/metrics", headers=_as("team-b"))).json()
            nobody = await http.get(f"{url}/metrics")
    assert own.status_code == scrape.status_code == 200
    _assert_only_team_a(own.json(), own.text, scrape.text)
    assert list(b["by_tenant"]) == ["team-b"] and b["requests"]["total"] == 5
    assert b["rejected"]["total"] == 0
    assert nobody.status_code == 401
    assert "METRICS_TOKEN" not in nobody.json()["error"]["message"]  # none is set


async def test_metrics_token_opens_the_whole_view_and_a_tenants_key_still_its_own(
    tmp_path: Path,
) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(
            sim,
            tenants_file=str(_tenants_file(tmp_path)),
            metrics_enabled=True,
            metrics_token="mt-operator",
        )
        async with running_proxy(settings) as url, httpx2.AsyncClient(timeout=30) as http:
            await _traffic(http, url)
            operator = {"Authorization": "Bearer mt-operator"}
            whole = (await http.get(f"{url}/metrics", headers=operator)).json()
            whole_scrape = (await http.get(f"{url}/metrics/prometheus", headers=operator)).text
            own = await http.get(f"{url}/metrics", headers=_as("team-a"))
            scrape = await http.get(f"{url}/metrics/prometheus", headers=_as("team-a"))
            wrong = await http.get(f"{url}/metrics", headers={"Authorization": "Bearer nope"})
    assert whole["view"] == "gateway"
    assert {"team-a", "team-b"} <= set(whole["by_tenant"]) and set(whole) >= GATEWAY_WIDE
    assert whole["requests"]["total"] == 8
    assert 'tenant="team-b"' in whole_scrape
    _assert_only_team_a(own.json(), own.text, scrape.text)
    assert wrong.status_code == 401 and "METRICS_TOKEN" in wrong.json()["error"]["message"]


async def test_without_client_keys_everyone_reads_the_whole_view() -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(sim, metrics_enabled=True)
        async with running_proxy(settings) as url, httpx2.AsyncClient(timeout=30) as http:
            reply = await http.post(f"{url}/v1/chat/completions", json=_chat(HAIKU))
            assert reply.status_code == 200
            whole = (await http.get(f"{url}/metrics")).json()
    assert whole["view"] == "gateway" and set(whole) >= GATEWAY_WIDE
    assert whole["requests"]["total"] == 1


def test_a_tenant_view_without_traffic_is_zero_and_never_another_entry(
    registry: MetricsRegistry,
) -> None:
    registry.record_success(SONNET, usage(10, 10), Timing(total=0.1), tenant="team-b")
    registry.record_rejected("queue_full")
    view = registry.tenant_snapshot("team-a")
    assert view["requests"]["total"] == 0 and view["rejected"]["total"] == 0
    assert list(view["by_tenant"]) == ["team-a"]
    assert registry.tenant_snapshot(OTHER_TENANTS)["rejected"]["total"] == 0
    assert "team-a" not in registry.snapshot()["by_tenant"]  # asking created no entry
