"""Tenants over loopback: who is who, fair admission, rate limits, budgets that survive a
restart, reloads, and keys that never show up anywhere but in the client's own headers."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from support import proxy_settings, running_proxy, running_simulator

from trio_batcher.simulator import SimulatorConfig
from trio_batcher.tenants import hash_key

KEYS = {
    "team-a": "tb-key-of-team-a-0123456789",
    "team-b": "tb-key-of-team-b-9876543210",
    "capped": "tb-key-of-the-capped-tenant",
    "limited": "tb-key-of-the-limited-tenant",
}


def _tenants_file(tmp_path: Path, extra: str = "", **fields: dict[str, Any]) -> Path:
    lines = []
    for name, key in KEYS.items():
        lines += ["[[tenant]]", f'name = "{name}"', f'key_sha256 = ["{hash_key(key)}"]']
        for field, value in fields.get(name, {}).items():
            lines.append(f"{field} = {value!r}".replace("'", '"'))
        lines.append("")
    path = tmp_path / "tenants.toml"
    path.write_text("\n".join(lines) + extra)
    return path


def _chat(text: str, model: str = "claude-sonnet-4-5") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


def _auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def _http() -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=400, max_keepalive_connections=400)
    return httpx2.AsyncClient(timeout=60, limits=limits)


async def test_a_flood_from_one_tenant_queues_and_sheds_only_that_tenant(
    tmp_path: Path,
) -> None:
    config = SimulatorConfig(ttft_ms=30, reply_tokens=4)
    async with running_simulator(config) as sim:
        settings = proxy_settings(
            sim,
            tenants_file=str(_tenants_file(tmp_path)),
            max_inflight=8,
            max_queue=64,
            acquire_timeout_s=30,
            metrics_enabled=True,
        )
        async with running_proxy(settings) as url, _http() as http:
            outcomes: dict[str, list[int]] = {"team-a": [], "team-b": []}

            async def one(tenant: str, i: int) -> None:
                reply = await http.post(
                    f"{url}/v1/chat/completions", json=_chat(f"{tenant} {i}"), headers=_auth(tenant)
                )
                outcomes[tenant].append(reply.status_code)

            async with trio.open_nursery() as nursery:
                for i in range(300):
                    nursery.start_soon(one, "team-a", i)
                await trio.sleep(0.2)  # the flood has filled the slots and the queue
                for i in range(20):
                    nursery.start_soon(one, "team-b", i)
            metrics = (await http.get(f"{url}/metrics", headers=_auth("team-a"))).json()
            b_metrics = (await http.get(f"{url}/metrics", headers=_auth("team-b"))).json()
    assert outcomes["team-b"] == [200] * 20  # never shed
    a = Counter(outcomes["team-a"])
    assert a[429] > 0 and set(a) == {200, 429}  # the flood absorbed the shedding
    shed = metrics["by_tenant"]["team-a"]["shed"]["by_reason"]
    assert shed.get("queue_full", 0) == a[429]
    assert b_metrics["by_tenant"]["team-b"]["shed"]["total"] == 0


async def test_weights_share_the_slots_three_to_one_under_saturation(tmp_path: Path) -> None:
    config = SimulatorConfig(ttft_ms=20, reply_tokens=2)
    async with running_simulator(config) as sim:
        settings = proxy_settings(
            sim,
            tenants_file=str(_tenants_file(tmp_path, **{"team-a": {"weight": 3}})),
            max_inflight=4,
            max_queue=400,
            acquire_timeout_s=60,
        )
        async with running_proxy(settings) as url, _http() as http:
            finished: list[str] = []
            stop = trio.Event()

            async def flood(tenant: str) -> None:
                while not stop.is_set():
                    reply = await http.post(
                        f"{url}/v1/chat/completions", json=_chat("hi"), headers=_auth(tenant)
                    )
                    assert reply.status_code == 200
                    finished.append(tenant)

            async with trio.open_nursery() as nursery:
                for _ in range(16):  # both keep a queue: the gate is saturated throughout
                    nursery.start_soon(flood, "team-a")
                    nursery.start_soon(flood, "team-b")
                while len(finished) < 440:  # noqa: ASYNC110 (counting another task's work)
                    await trio.sleep(0.05)
                stop.set()
    steady = Counter(finished[40:440])  # after the first slots were handed out unqueued
    assert steady["team-a"] / steady["team-b"] == pytest.approx(3.0, rel=0.10), steady


async def test_a_rate_limit_answers_429_with_retry_after_in_each_dialect(tmp_path: Path) -> None:
    path = _tenants_file(tmp_path, **{"limited": {"rpm": 2}})
    async with running_simulator() as sim:
        settings = proxy_settings(sim, tenants_file=str(path), metrics_enabled=True)
        async with running_proxy(settings) as url, _http() as http:
            for _ in range(2):
                reply = await http.post(
                    f"{url}/v1/chat/completions", json=_chat("hi"), headers=_auth("limited")
                )
                assert reply.status_code == 200
            refused = await http.post(
                f"{url}/v1/chat/completions", json=_chat("hi"), headers=_auth("limited")
            )
            anthropic = await http.post(
                f"{url}/v1/messages",
                json={**_chat("hi"), "max_tokens": 16},
                headers={"x-api-key": KEYS["limited"], "anthropic-version": "2023-06-01"},
            )
            other = await http.post(
                f"{url}/v1/chat/completions", json=_chat("hi"), headers=_auth("team-b")
            )
            metrics = (await http.get(f"{url}/metrics", headers=_auth("limited"))).json()
            upstream_calls = (await sim.stats())["requests_total"]
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and "2 requests per minute" in error["message"]
    assert anthropic.status_code == 429 and anthropic.json()["error"]["type"] == "rate_limit_error"
    assert "retry-after" in anthropic.headers
    assert other.status_code == 200  # another tenant is not held back
    assert metrics["by_tenant"]["limited"]["shed"]["by_reason"]["rate_limited"] == 2
    assert upstream_calls == 3  # refusals never reach the upstream


async def test_a_model_outside_the_tenants_list_is_refused_403(tmp_path: Path) -> None:
    path = _tenants_file(tmp_path, **{"team-a": {"models": ["claude-haiku-*"]}})
    async with running_simulator() as sim:
        settings = proxy_settings(sim, tenants_file=str(path))
        async with running_proxy(settings) as url, _http() as http:
            refused = await http.post(
                f"{url}/v1/chat/completions", json=_chat("hi"), headers=_auth("team-a")
            )
            allowed = await http.post(
                f"{url}/v1/chat/completions",
                json=_chat("hi", "claude-haiku-4-5"),
                headers=_auth("team-a"),
            )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_allowed"
    assert allowed.status_code == 200


async def test_a_spent_budget_refuses_its_tenant_serves_the_others_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    # Four output tokens of claude-sonnet-4-5 cost $0.00006 plus the input: a budget of
    # $0.0002 lasts a few requests.
    path = _tenants_file(tmp_path, **{"capped": {"budget_usd": 0.0002}})
    data = tmp_path / "data"
    async with running_simulator(SimulatorConfig(reply_tokens=4)) as sim:
        settings = proxy_settings(
            sim, tenants_file=str(path), data_dir=str(data), metrics_enabled=True
        )
        async with running_proxy(settings) as url, _http() as http:
            statuses = []
            for i in range(20):
                reply = await http.post(
                    f"{url}/v1/chat/completions", json=_chat(f"hi {i}"), headers=_auth("capped")
                )
                statuses.append(reply.status_code)
                if reply.status_code != 200:
                    refused = reply
                    break
            other = await http.post(
                f"{url}/v1/chat/completions", json=_chat("hi"), headers=_auth("team-a")
            )
            spent = (await http.get(f"{url}/metrics", headers=_auth("capped"))).json()["by_tenant"][
                "capped"
            ]
        assert 1 < len(statuses) < 20 and statuses[-1] == 429
        error = refused.json()["error"]
        assert error["code"] == error["type"] == "insufficient_quota"
        assert "budget of $0.0002" in error["message"] and "capped" in error["message"]
        assert refused.headers["x-should-retry"] == "false"
        assert int(refused.headers["retry-after"]) > 0
        assert other.status_code == 200
        assert spent["estimated_cost_usd"] >= 0.0002
        # A new process on the same data directory: the budget is still spent.
        async with running_proxy(settings) as url, _http() as http:
            again = await http.post(
                f"{url}/v1/chat/completions", json=_chat("again"), headers=_auth("capped")
            )
    assert again.status_code == 429 and again.json()["error"]["code"] == "insufficient_quota"


async def test_a_changed_file_is_taken_without_a_restart_and_a_bad_one_refused(
    tmp_path: Path,
) -> None:
    path = _tenants_file(tmp_path)
    async with running_simulator() as sim:
        settings = proxy_settings(sim, tenants_file=str(path))
        async with running_proxy(settings) as url, _http() as http:
            newcomer = "tb-key-of-a-tenant-added-later"
            body, headers = _chat("hi"), {"Authorization": f"Bearer {newcomer}"}
            assert (
                await http.post(f"{url}/v1/chat/completions", json=body, headers=headers)
            ).status_code == 401
            text = path.read_text() + (
                f'\n[[tenant]]\nname = "later"\nkey_sha256 = ["{hash_key(newcomer)}"]\n'
            )
            path.write_text(text)
            with trio.fail_after(10):  # the watcher looks every second
                while (  # noqa: ASYNC110 (a file another task watches)
                    await http.post(f"{url}/v1/chat/completions", json=body, headers=headers)
                ).status_code != 200:
                    await trio.sleep(0.2)
            path.write_text(text + "\n[[tenant]]\nname = 'broken'\nweight = -1\n")
            await trio.sleep(2.5)  # refused: the old directory stays in force
            still = await http.post(f"{url}/v1/chat/completions", json=body, headers=headers)
    assert still.status_code == 200


async def test_no_key_appears_in_logs_metrics_prometheus_or_the_dashboards_data(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = _tenants_file(tmp_path, **{"limited": {"rpm": 1}, "capped": {"budget_usd": 0.0}})
    async with running_simulator() as sim:
        settings = proxy_settings(
            sim,
            tenants_file=str(path),
            metrics_enabled=True,
            metrics_token="mt-operator",
            data_dir=str(tmp_path / "d"),
        )
        operator = {"Authorization": "Bearer mt-operator"}
        async with running_proxy(settings) as url, _http() as http:
            for tenant in KEYS:
                for _ in range(2):
                    await http.post(
                        f"{url}/v1/chat/completions", json=_chat("hi"), headers=_auth(tenant)
                    )
            await http.post(
                f"{url}/v1/chat/completions",
                json=_chat("hi"),
                headers={"Authorization": "Bearer tb-a-wrong-key-nobody-has"},
            )
            texts = [
                (await http.get(f"{url}/metrics", headers=_auth("team-a"))).text,
                (await http.get(f"{url}/metrics/prometheus", headers=operator)).text,
                (await http.get(f"{url}/dashboard")).text,
                (await http.get(f"{url}/metrics", headers=operator)).text,
                (await http.get(f"{url}/metrics/prometheus", headers=_auth("team-a"))).text,
            ]
    texts.append(caplog.text)
    everything = "\n".join(texts)
    for key in (*KEYS.values(), "tb-a-wrong-key-nobody-has"):
        assert key not in everything
        assert hash_key(key) not in everything  # not even the digests
    assert all(f'tenant="{name}"' in texts[1] for name in KEYS)  # names, not keys
