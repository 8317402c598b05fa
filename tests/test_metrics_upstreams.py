"""The observatory per upstream: ``by_upstream`` and ``routing`` in ``GET /metrics``.

Pure: a registry fed with the calls the router makes (``record_success`` / ``record_error``
with ``upstream=``, ``record_attempt``, ``record_failover``, ``record_spill``,
``record_affinity``), and what its snapshot, its tenant view and the price table answer.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from trio_batcher.admission.fair_queue import TenantShare
from trio_batcher.observatory.metrics import OTHER_UPSTREAMS, MetricsRegistry, Timing
from trio_batcher.observatory.pricing import PriceTable, TokenUsage, load_pricing
from trio_batcher.observatory.prometheus import PrometheusExporter
from trio_batcher.pipeline.outcomes import Outcomes
from trio_batcher.pipeline.tenancy import TenantGrant
from trio_batcher.tenants import OverBudget, Tenant
from trio_batcher.upstream.request import UpstreamRequest

SONNET = "claude-sonnet-4-5-20250929"
MILLION = 1_000_000
# Bedrock's regional endpoints cost 10 % more than the global ones.
BEDROCK_EU_SONNET = {
    "input": "3.30",
    "output": "16.50",
    "cache_write_5m": "4.125",
    "cache_write_1h": "6.60",
    "cache_read": "0.33",
}
UPSTREAMS = ("anthropic-main", "bedrock-eu")


@pytest.fixture
def pricing(tmp_path: Path) -> PriceTable:
    """The bundled table, with bedrock-eu's own Sonnet 4.5 prices laid over it."""
    bundled = json.loads(
        (Path(__file__).parent.parent / "trio_batcher" / "data" / "pricing.json").read_text()
    )
    bundled["upstreams"] = {"bedrock-eu": {"claude-sonnet-4-5": BEDROCK_EU_SONNET}}
    path = tmp_path / "pricing.json"
    path.write_text(json.dumps(bundled))
    return load_pricing(str(path))


def registry_for(pricing: PriceTable, **kwargs: Any) -> MetricsRegistry:
    return MetricsRegistry(window=16, pricing=pricing, known_upstreams=lambda: UPSTREAMS, **kwargs)


def feed(registry: MetricsRegistry) -> None:
    cached = {
        "input_tokens": 100,
        "output_tokens": 50,
        "cache_read_input_tokens": 800,
        "cache_creation_input_tokens": 100,
    }
    million = {"input_tokens": MILLION, "output_tokens": MILLION}
    registry.record_success(
        SONNET,
        cached,
        Timing(total=0.2, upstream_ttfb=0.05, upstream=0.15),
        upstream="anthropic-main",
    )
    registry.record_success(
        SONNET, million, Timing(total=0.4, upstream=0.3), upstream="anthropic-main", tenant="t"
    )
    registry.record_error(SONNET, 529, Timing(total=0.1, upstream=0.08), upstream="anthropic-main")
    registry.record_success(
        SONNET, million, Timing(total=0.9, queue=0.1, upstream=0.7), upstream="bedrock-eu"
    )
    # A stream its client left after usage: an error with tokens, priced at bedrock-eu's rate.
    registry.record_error(
        SONNET,
        499,
        Timing(total=1.5, ttft=0.4, upstream=1.4),
        stream=True,
        usage={"input_tokens": 10, "output_tokens": 20},
        upstream="bedrock-eu",
    )
    registry.record_error(None, 400, Timing(total=0.001))  # refused before routing


def test_by_upstream_counts_each_upstreams_requests_errors_latency_and_tokens(
    pricing: PriceTable,
) -> None:
    registry = registry_for(pricing)
    feed(registry)
    snap = registry.snapshot()
    by_upstream = snap["by_upstream"]
    assert list(by_upstream) == ["anthropic-main", "bedrock-eu"]

    main, eu = by_upstream["anthropic-main"], by_upstream["bedrock-eu"]
    assert (main["requests"], main["success"], main["errors"]) == (3, 2, 1)
    assert main["errors_by_status"] == {"529": 1}
    assert (eu["requests"], eu["errors"], eu["stream"]) == (2, 1, 1)
    assert eu["errors_by_status"] == {"499": 1}
    # The refused request reached no upstream: by_upstream adds up to the routed ones only.
    assert snap["requests"]["total"] == 6
    assert sum(row["requests"] for row in by_upstream.values()) == 5

    assert main["latency"] == {
        "p50_ms": 200.0,
        "p95_ms": 400.0,
        "p99_ms": 400.0,
        "max_ms": 400.0,
        "sample_count": 3,
        "window": 16,
    }
    assert main["timing"]["upstream_ttfb_ms"]["sample_count"] == 1
    assert main["timing"]["upstream_ms"]["max"] == 300.0
    assert eu["timing"]["queue_ms"]["max"] == 100.0
    assert eu["timing"]["ttft_ms"]["p50"] == 400.0
    assert set(eu["timing"]) == set(snap["timing"])  # the top-level section's parts

    assert main["tokens"] == {
        "input": MILLION + 100,
        "output": MILLION + 50,
        "cache_read": 800,
        "cache_write": 100,
    }
    assert eu["tokens"] == {
        "input": MILLION + 10,
        "output": MILLION + 20,
        "cache_read": 0,
        "cache_write": 0,
    }
    # cache_read / (input + cache_read + cache_write): what share of the prompt was a hit.
    assert main["cache_read_ratio"] == round(800 / (MILLION + 100 + 800 + 100), 4)
    assert eu["cache_read_ratio"] == 0.0


def test_an_upstream_with_its_own_prices_costs_its_requests_at_them_everywhere(
    pricing: PriceTable,
) -> None:
    """One figure per request, at the serving upstream's price: by_upstream, by_model,
    by_tenant, by_surface and the total all carry it."""
    registry = registry_for(pricing)
    registry.record_success(
        SONNET,
        {"input_tokens": MILLION, "output_tokens": MILLION},
        Timing(total=0.1),
        upstream="anthropic-main",
        surface="anthropic.messages",
    )
    registry.record_success(
        SONNET,
        {"input_tokens": MILLION, "output_tokens": MILLION},
        Timing(total=0.1),
        upstream="bedrock-eu",
        surface="anthropic.messages",
    )
    snap = registry.snapshot()
    assert snap["by_upstream"]["anthropic-main"]["cost_usd"] == 18.0  # 3 + 15
    assert snap["by_upstream"]["bedrock-eu"]["cost_usd"] == 19.8  # 3.30 + 16.50
    assert snap["by_upstream"]["bedrock-eu"]["own_prices"] is True
    assert snap["by_upstream"]["anthropic-main"]["own_prices"] is False
    assert snap["cost"]["estimated_cost_usd"] == pytest.approx(37.8, rel=1e-12)
    assert snap["by_model"][SONNET]["cost_usd"] == pytest.approx(37.8, rel=1e-12)
    assert snap["by_tenant"]["(other)"]["estimated_cost_usd"] == pytest.approx(37.8, rel=1e-12)
    assert snap["by_surface"]["anthropic.messages"]["estimated_cost_usd"] == pytest.approx(37.8)
    # Without the upstream (a batch, a caller not yet routed) the main table's price holds.
    registry.record_success(SONNET, {"input_tokens": MILLION}, Timing(total=0.1))
    assert registry.snapshot()["cost"]["estimated_cost_usd"] == pytest.approx(40.8, rel=1e-12)


def test_an_unpriced_model_leaves_its_upstreams_cost_incomplete(pricing: PriceTable) -> None:
    registry = registry_for(pricing)
    registry.record_success(
        "claude-unknown-9", {"input_tokens": 5}, Timing(total=0.1), upstream="bedrock-eu"
    )
    eu = registry.snapshot()["by_upstream"]["bedrock-eu"]
    assert (eu["cost_usd"], eu["estimate_complete"], eu["unpriced_requests"]) == (0.0, False, 1)


def test_attempts_are_counted_per_upstream_by_outcome(pricing: PriceTable) -> None:
    registry = registry_for(pricing)
    for upstream, outcome in [
        ("anthropic-main", "overloaded"),
        ("anthropic-main", "overloaded"),
        ("bedrock-eu", "ok"),
        ("anthropic-main", "ok"),
        ("bedrock-eu", "timeout"),
    ]:
        registry.record_attempt(upstream, outcome)
    by_upstream = registry.snapshot()["by_upstream"]
    assert by_upstream["anthropic-main"]["attempts_by_outcome"] == {"ok": 1, "overloaded": 2}
    assert by_upstream["anthropic-main"]["attempts"] == 3
    assert by_upstream["bedrock-eu"]["attempts_by_outcome"] == {"ok": 1, "timeout": 1}
    # An upstream only attempted, never finishing a request, has an entry with no requests.
    assert by_upstream["bedrock-eu"]["requests"] == 0
    assert by_upstream["bedrock-eu"]["latency"]["p50_ms"] is None
    assert by_upstream["bedrock-eu"]["cache_read_ratio"] is None


def test_routing_counts_failovers_spills_and_affinity(pricing: PriceTable) -> None:
    registry = registry_for(pricing)
    assert registry.snapshot()["routing"] == {
        "failovers_total": 0,
        "failovers_by_cause": {},
        "failovers": [],
        "spills_total": 0,
        "spills_by_cause": {},
        "spills": [],
        "affinity": {"continuing_turns": 0, "kept": 0, "moved": 0, "kept_ratio": None},
    }
    registry.record_failover("anthropic-main", "bedrock-eu", "overloaded")
    registry.record_failover("anthropic-main", "bedrock-eu", "connect_error")
    registry.record_failover("bedrock-eu", "anthropic-main", "overloaded")
    registry.record_spill("anthropic-main", "bedrock-eu", "full")
    registry.record_spill("anthropic-main", "bedrock-eu", "cooling")
    registry.record_spill("bedrock-eu", "anthropic-main", "full")
    for kept in (True, True, True, False):
        registry.record_affinity(kept)
    assert registry.snapshot()["routing"] == {
        "failovers_total": 3,
        "failovers_by_cause": {"connect_error": 1, "overloaded": 2},
        "failovers": [
            {"from": "anthropic-main", "to": "bedrock-eu", "count": 2},
            {"from": "bedrock-eu", "to": "anthropic-main", "count": 1},
        ],
        "spills_total": 3,
        "spills_by_cause": {"cooling": 1, "full": 2},
        "spills": [
            {"from": "anthropic-main", "to": "bedrock-eu", "count": 2},
            {"from": "bedrock-eu", "to": "anthropic-main", "count": 1},
        ],
        "affinity": {"continuing_turns": 4, "kept": 3, "moved": 1, "kept_ratio": 0.75},
    }


def test_only_configured_upstream_names_get_an_entry(pricing: PriceTable) -> None:
    registry = registry_for(pricing)
    registry.record_success(SONNET, {}, Timing(total=0.1), upstream="anthropic-main")
    registry.record_success(SONNET, {}, Timing(total=0.1), upstream="not-configured")
    registry.record_error(SONNET, 503, Timing(total=0.1), upstream="also-unknown")
    registry.record_attempt("stray", "ok")
    registry.record_failover("stray", "anthropic-main", "overloaded")
    snap = registry.snapshot()
    assert set(snap["by_upstream"]) == {"anthropic-main", OTHER_UPSTREAMS}
    other = snap["by_upstream"][OTHER_UPSTREAMS]
    assert (other["requests"], other["errors"], other["attempts"]) == (2, 1, 1)
    assert snap["routing"]["failovers"] == [
        {"from": OTHER_UPSTREAMS, "to": "anthropic-main", "count": 1}
    ]


def test_without_known_upstreams_any_name_counts_up_to_64_then_other(
    pricing: PriceTable,
) -> None:
    registry = MetricsRegistry(window=4, pricing=pricing)
    for i in range(100):
        registry.record_success(SONNET, {}, Timing(total=0.1), upstream=f"u{i}")
    by_upstream = registry.snapshot()["by_upstream"]
    assert len(by_upstream) == 65
    assert {f"u{i}" for i in range(64)} <= set(by_upstream)
    assert by_upstream[OTHER_UPSTREAMS]["requests"] == 36
    # A name that has its entry keeps it.
    registry.record_success(SONNET, {}, Timing(total=0.1), upstream="u3")
    assert registry.snapshot()["by_upstream"]["u3"]["requests"] == 2


def test_a_name_the_configuration_adds_later_gets_its_entry_at_first_use(
    pricing: PriceTable,
) -> None:
    configured = {"a"}
    registry = MetricsRegistry(window=4, pricing=pricing, known_upstreams=lambda: configured)
    registry.record_success(SONNET, {}, Timing(total=0.1), upstream="b")
    configured.add("c")
    registry.record_success(SONNET, {}, Timing(total=0.1), upstream="c")
    assert set(registry.snapshot()["by_upstream"]) == {OTHER_UPSTREAMS, "c"}
    # The app may name them once it has read the file, as it does the tenants.
    registry.known_upstreams = lambda: ("d",)
    registry.record_success(SONNET, {}, Timing(total=0.1), upstream="d")
    assert set(registry.snapshot()["by_upstream"]) == {OTHER_UPSTREAMS, "c", "d"}


def test_a_tenants_own_view_has_no_upstream_split_nor_routing(pricing: PriceTable) -> None:
    """Per-upstream figures count every tenant's requests (and routing shows where the
    others' conversations went): the tenant's JSON and Prometheus views leave them out."""
    registry = registry_for(pricing, known_tenants=lambda: {"team-a", "team-b"})
    registry.record_success(
        SONNET, {"output_tokens": 5}, Timing(total=0.1), tenant="team-a", upstream="bedrock-eu"
    )
    registry.record_success(
        SONNET, {"output_tokens": 7}, Timing(total=0.1), tenant="team-b", upstream="anthropic-main"
    )
    registry.record_failover("anthropic-main", "bedrock-eu", "overloaded")
    registry.record_affinity(True)
    whole = registry.snapshot()
    assert "by_upstream" in whole and "routing" in whole

    own = registry.tenant_snapshot("team-a")
    assert "by_upstream" not in own and "routing" not in own
    text = json.dumps(own)
    assert "anthropic-main" not in text and "bedrock-eu" not in text

    exporter = PrometheusExporter(registry, lambda: pytest.fail("no gauges in a tenant view"))
    body, _ = exporter.render_tenant("team-a")
    assert b"upstream=" not in body
    for family in (b"routed_", b"failover", b"spill", b"affinity"):
        assert family not in body


def _request(**kwargs: Any) -> UpstreamRequest:
    return UpstreamRequest(
        body={"model": SONNET}, model=SONNET, stream=False, surface="anthropic.messages", **kwargs
    )


def test_outcomes_pass_the_serving_upstream_to_the_registry(pricing: PriceTable) -> None:
    registry = registry_for(pricing)
    outcomes = Outcomes(registry)
    request = _request(tenant="t")
    outcomes.success(request, {"output_tokens": 3}, Timing(total=0.1), upstream="bedrock-eu")
    outcomes.error(request, 529, Timing(total=0.1), upstream="anthropic-main")
    outcomes.error(request, 400, Timing(total=0.1))  # never routed
    outcomes.success(request, {"output_tokens": 3}, Timing(total=0.1))  # callers of before
    snap = registry.snapshot()
    assert snap["requests"]["total"] == 4
    assert snap["by_upstream"]["bedrock-eu"]["requests"] == 1
    assert snap["by_upstream"]["anthropic-main"]["errors_by_status"] == {"529": 1}
    assert sum(row["requests"] for row in snap["by_upstream"].values()) == 2


class _Ledger:
    def __init__(self) -> None:
        self.charged: list[tuple[str, float]] = []

    def over_budget(self, tenant: Tenant) -> OverBudget | None:
        return None

    def charge(self, tenant: str, usd: float) -> None:
        self.charged.append((tenant, usd))


def test_a_tenant_is_charged_the_price_of_the_upstream_that_served_it(
    pricing: PriceTable,
) -> None:
    usage = {"input_tokens": MILLION, "output_tokens": MILLION}
    ledger = _Ledger()
    for upstream in ("bedrock-eu", "anthropic-main", None):
        grant = TenantGrant("t", TenantShare("t"), None, ledger, pricing)
        if upstream is None:
            grant.settle(SONNET, usage)  # the callers of before: the main table
        else:
            grant.settle(SONNET, usage, upstream=upstream)
    assert ledger.charged == [("t", 19.8), ("t", 18.0), ("t", 18.0)]
    tokens = TokenUsage.from_anthropic(usage)
    assert pricing.cost(SONNET, tokens, upstream="bedrock-eu") == Decimal("19.8")
