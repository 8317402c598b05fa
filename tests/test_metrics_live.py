"""The observatory against a live server: exact counts, Prometheus agreeing with the JSON."""

from __future__ import annotations

from typing import Any

import httpx2
import trio
from prometheus_client.parser import text_string_to_metric_families
from support import proxy_and_simulator


def _body(text: str, *, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
    }


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _sum(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and all(dict(sample_labels).get(k) == v for k, v in labels.items())
    )


async def test_counts_equal_successes_errors_and_shed_and_prometheus_agrees() -> None:
    n_ok, n_err, n_shed = 5, 3, 4
    changes = {
        "metrics_enabled": True,
        "max_inflight": 1,
        "max_queue": 0,
        "upstream_max_retries": 0,
        "upstream_coordinated_backoff": False,
    }
    async with (
        proxy_and_simulator(**changes) as (url, sim),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        chat = f"{url}/v1/chat/completions"
        for i in range(n_ok - 1):
            response = await http.post(chat, json=_body(f"ok {i}", stream=i % 2 == 1))
            assert response.status_code == 200
            assert "queue;dur=" in response.headers["server-timing"]
            assert "upstream;dur=" in response.headers["server-timing"]
        for fault in ("status=500", "status=529", "status=400"):
            assert (await http.post(chat, json=_body(f"[[sim:{fault}]]"))).status_code >= 400
        statuses: list[int] = []
        async with trio.open_nursery() as nursery:
            slow = _body("slow [[sim:ttft_ms=400]]")

            async def hold_the_slot() -> None:
                statuses.append((await http.post(chat, json=slow)).status_code)

            nursery.start_soon(hold_the_slot)
            with trio.fail_after(5):  # in flight upstream means it holds the only slot
                await sim.wait_until(lambda stats: stats["in_flight"] == 1)
            for i in range(n_shed):
                response = await http.post(chat, json=_body(f"shed {i}"))
                statuses.append(response.status_code)
                assert response.headers["retry-after"] == "1"
        assert sorted(statuses) == [200] + [429] * n_shed

        snapshot = (await http.get(f"{url}/metrics")).json()
        assert snapshot["requests"]["total"] == n_ok + n_err
        assert snapshot["requests"]["success"] == n_ok
        assert snapshot["requests"]["error"] == n_err
        assert snapshot["requests"]["by_status"] == {"200": n_ok, "400": 1, "502": 1, "503": 1}
        assert snapshot["rejected"] == {"total": n_shed, "by_reason": {"queue_full": n_shed}}
        assert snapshot["latency"]["sample_count"] == n_ok + n_err
        assert snapshot["tokens"]["output"] > 0
        assert snapshot["cost"]["estimate_complete"] is True
        assert snapshot["cost"]["estimated_cost_usd"] > 0
        for part in ("queue_ms", "upstream_ms", "upstream_ttfb_ms", "overhead_ms", "ttft_ms"):
            assert snapshot["timing"][part]["p50"] is not None, part
        assert snapshot["concurrency"]["active"] == 0
        upstream = snapshot["upstream"]
        assert upstream["attempts"] == n_ok + n_err  # retries are off here: one attempt each
        assert upstream["retries"] == 0
        failures = {k: v for k, v in upstream["failures_by_signal"].items() if v}
        assert failures == {"server_error": 1, "overloaded": 1, "rejected": 1}

        prom = await http.get(f"{url}/metrics/prometheus")
        assert prom.status_code == 200 and prom.headers["content-type"].startswith("text/plain")
        samples = _samples(prom.text)
        assert _sum(samples, "trio_batcher_requests_total") == n_ok + n_err
        assert _sum(samples, "trio_batcher_requests_total", status="200") == n_ok
        assert _sum(samples, "trio_batcher_rejected_total", reason="queue_full") == n_shed
        assert _sum(samples, "trio_batcher_request_duration_seconds_count") == n_ok + n_err
        assert _sum(samples, "trio_batcher_queue_wait_seconds_count") == n_ok + n_err
        assert (
            _sum(samples, "trio_batcher_tokens_total", kind="output")
            == snapshot["tokens"]["output"]
        )
        assert (
            abs(
                _sum(samples, "trio_batcher_cost_usd_total")
                - snapshot["cost"]["estimated_cost_usd"]
            )
            < 1e-9
        )


async def test_metrics_are_404_when_disabled_and_need_the_token_when_set() -> None:
    async with proxy_and_simulator() as (url, _sim), httpx2.AsyncClient() as http:
        for path in ("/metrics", "/metrics/prometheus"):
            response = await http.get(f"{url}{path}")
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "metrics_disabled"
    async with (
        proxy_and_simulator(metrics_enabled=True, metrics_token="mt-secret") as (url, _sim),
        httpx2.AsyncClient() as http,
    ):
        assert (await http.get(f"{url}/metrics")).status_code == 401
        assert (
            await http.get(f"{url}/metrics", headers={"Authorization": "Bearer nope"})
        ).status_code == 401
        ok = await http.get(
            f"{url}/metrics/prometheus", headers={"Authorization": "Bearer mt-secret"}
        )
        assert ok.status_code == 200
        # The page loads without a token (a browser cannot send one); its polls need it.
        page = await http.get(f"{url}/dashboard")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
    async with (
        proxy_and_simulator(metrics_enabled=True, proxy_api_keys=("pk",)) as (url, _sim),
        httpx2.AsyncClient() as http,
    ):
        refused = await http.get(f"{url}/metrics")
        assert refused.status_code == 401
        assert "PROXY_API_KEYS" in refused.json()["error"]["message"]
        assert (await http.get(f"{url}/metrics", headers={"Authorization": "Bearer pk"})).is_success
        assert (await http.get(f"{url}/dashboard")).status_code == 200


async def test_the_default_model_alias_is_counted_and_priced_as_the_model_called() -> None:
    async with (
        proxy_and_simulator(metrics_enabled=True, default_model="claude-sonnet-4-5") as (url, _),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        body = {**_body("hi"), "model": "default"}
        response = await http.post(f"{url}/v1/chat/completions", json=body)
        assert response.status_code == 200
        assert response.json()["model"] == "default"  # echoed as the client named it
        metrics = (await http.get(f"{url}/metrics")).json()
        assert list(metrics["by_model"]) == ["claude-sonnet-4-5"]
        assert metrics["by_model"]["claude-sonnet-4-5"]["priced"] is True
        assert metrics["cost"]["estimate_complete"] is True
        assert metrics["cost"]["estimated_cost_usd"] > 0


async def test_requests_refused_for_bad_input_or_a_missing_key_are_counted() -> None:
    changes = {
        "metrics_enabled": True,
        "max_body_bytes": 2000,
        "proxy_api_keys": ("k1",),
        "metrics_token": "mt",  # the whole view: the 401 is no tenant's
    }
    async with (
        proxy_and_simulator(**changes) as (url, sim),
        httpx2.AsyncClient(timeout=30, headers={"authorization": "Bearer k1"}) as http,
    ):
        chat = f"{url}/v1/chat/completions"
        assert (await http.post(chat, content=b"{not json")).status_code == 400
        assert (await http.post(chat, content=b"x" * 3000)).status_code == 413
        bad = {**_body("hi"), "n": 2}
        assert (await http.post(chat, json=bad)).status_code == 400
        keyless = await http.post(chat, json=_body("hi"), headers={"authorization": ""})
        assert keyless.status_code == 401
        assert (await http.post(chat, json=_body("ok"))).status_code == 200
        metrics = (await http.get(f"{url}/metrics", headers={"authorization": "Bearer mt"})).json()
        assert metrics["requests"]["by_status"] == {"200": 1, "400": 2, "401": 1, "413": 1}
        assert metrics["requests"]["error"] == 4
        # Refused requests never spend the registry's per-model entries on unchecked names.
        assert metrics["by_model"]["(none)"]["errors"] == 4
        assert metrics["by_model"]["claude-sonnet-4-5"]["errors"] == 0
        assert metrics["latency"]["sample_count"] == 5
        assert (await sim.stats())["requests_total"] == 1
