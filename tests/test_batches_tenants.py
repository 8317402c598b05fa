"""A batch's spend is its tenant's: attributed in ``by_tenant`` and charged to its budget,
at the batch price (half the standard rate)."""

from __future__ import annotations

from pathlib import Path

import httpx2
import openai
import pytest
from support import openai_client, proxy_settings, running_proxy, running_simulator
from test_batches_large import create, line, until_final
from test_tenants_live import KEYS, _auth, _chat, _tenants_file

from trio_batcher.observatory.pricing import TokenUsage, load_pricing
from trio_batcher.offline import BATCH_PRICE_FACTOR
from trio_batcher.runtime import Runtime
from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.tenants import ANONYMOUS, MemorySpendStore, SpendLedger, TenantsWatcher

SONNET = "claude-sonnet-4-5-20250929"


async def test_a_batch_counts_against_its_tenants_budget_and_shows_in_its_metrics(
    tmp_path: Path,
) -> None:
    # Ten replies of 4 tokens on claude-sonnet-4-5 cost about $0.0005 at the standard rate,
    # half that in a batch: past a budget of $0.0002.
    path = _tenants_file(tmp_path, **{"capped": {"budget_usd": 0.0002}})
    async with running_simulator(SimulatorConfig(reply_tokens=4)) as sim:
        settings = proxy_settings(
            sim,
            tenants_file=str(path),
            data_dir=str(tmp_path / "d"),
            metrics_enabled=True,
            metrics_token="mt-operator",
        )
        async with running_proxy(settings) as url, httpx2.AsyncClient(timeout=30) as http:
            client = openai_client(url, api_key=KEYS["capped"])
            content = b"".join(line(f"n{i}", i) for i in range(10))
            batch = await until_final(client, (await create(client, content)).id)
            assert batch.status == "completed" and batch.request_counts.completed == 10
            operator = {"Authorization": "Bearer mt-operator"}  # the whole view: by_surface
            snapshot = (await http.get(f"{url}/metrics", headers=operator)).json()
            refused = await http.post(
                f"{url}/v1/chat/completions", json=_chat("after"), headers=_auth("capped")
            )
            other = await http.post(
                f"{url}/v1/chat/completions", json=_chat("hi"), headers=_auth("team-a")
            )
            # A new batch is refused too, before it is stored or sent.
            again = await client.files.create(file=("b.jsonl", line("x", 0)), purpose="batch")
            with pytest.raises(openai.RateLimitError) as no_batch:
                await client.batches.create(
                    input_file_id=again.id,
                    endpoint="/v1/chat/completions",
                    completion_window="24h",
                )
            listed = await client.batches.list()
    assert no_batch.value.code == "insufficient_quota"
    assert no_batch.value.response.headers["x-should-retry"] == "false"
    assert [b.id for b in listed.data] == [batch.id]
    capped = snapshot["by_tenant"]["capped"]
    surface = snapshot["by_surface"]["openai.batch"]
    assert capped["requests"]["by_status"] == surface["requests"]["by_status"] == {"200": 10}
    assert capped["tokens"] == surface["tokens"] and capped["tokens"]["output"] == 40
    tokens = capped["tokens"]
    half_price = (tokens["input"] * 3 + tokens["output"] * 15) / 1e6 / 2  # sonnet 4.5, per M
    assert capped["estimated_cost_usd"] == pytest.approx(half_price)
    assert surface["estimated_cost_usd"] == pytest.approx(half_price) and half_price > 0.0002
    assert "team-a" not in snapshot["by_tenant"] or not snapshot["by_tenant"]["team-a"].get(
        "tokens", {}
    ).get("output")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
    assert other.status_code == 200


async def test_the_ledger_is_charged_the_batch_cost_and_a_keyless_anonymous_only_with_a_budget(
    tmp_path: Path,
) -> None:
    # Runtime.record_batch_usage charges what the guard would for the same usage in
    # realtime, times the batch discount, to the same ledger; like the guard it writes no
    # spend for the anonymous caller of a gateway without keys unless it has a budget.
    used = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 500}
    standard = load_pricing(None).cost(SONNET, TokenUsage.from_anthropic(used))
    assert standard is not None

    async def charged(watcher: TenantsWatcher, tenant: str | None) -> dict[str, float]:
        rt = Runtime(Settings(), watcher)
        try:
            rt.ledger = SpendLedger(MemorySpendStore())
            rt.record_batch_usage(tenant, SONNET, used, 3)
            return {name: t.pending_usd for name, t in rt.ledger.statistics().tenants.items()}
        finally:
            await rt.http.aclose()

    keyed = TenantsWatcher(_tenants_file(tmp_path))
    assert await charged(keyed, "team-a") == {
        "team-a": pytest.approx(float(standard * BATCH_PRICE_FACTOR), abs=1e-9)
    }
    assert await charged(keyed, None) == {}  # a batch stored before tenants were kept
    assert await charged(TenantsWatcher(None), ANONYMOUS) == {}
    budgeted = tmp_path / "anonymous.toml"
    budgeted.write_text('[[tenant]]\nname = "anonymous"\nbudget_usd = 5.0\n')
    assert await charged(TenantsWatcher(budgeted), ANONYMOUS) == {
        ANONYMOUS: pytest.approx(float(standard * BATCH_PRICE_FACTOR), abs=1e-9)
    }
