"""Native Message Batches through the gateway: relayed to the anthropic upstream, each batch
owned by the tenant that made it, charged once to it at the batch price, results streamed."""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import psutil
import pytest
import trio
from quart import Response, request
from quart_trio import QuartTrio
from support import (
    SIM_KEY,
    _hosting,
    anthropic_client,
    proxy_settings,
    running_proxy,
    running_simulator,
)
from test_tenants_live import KEYS, _tenants_file

from trio_batcher.serving import serve_app
from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig

SONNET = "claude-sonnet-4-5-20250929"
OPERATOR = {"Authorization": "Bearer mt-operator"}


def _requests(n: int, model: str = SONNET) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"r{i}",
            "params": {
                "model": model,
                "max_tokens": 16,
                "messages": [{"role": "user", "content": f"question {i}"}],
            },
        }
        for i in range(n)
    ]


async def _until_ended(client: Any, batch_id: str) -> Any:
    with trio.fail_after(20):  # polling: the batch ends in another server
        batch = await client.messages.batches.retrieve(batch_id)
        while batch.processing_status != "ended":
            await trio.sleep(0.05)
            batch = await client.messages.batches.retrieve(batch_id)
    return batch


async def _tenant_view(http: httpx2.AsyncClient, url: str, tenant: str) -> dict[str, Any]:
    snapshot: dict[str, Any] = (await http.get(f"{url}/metrics", headers=OPERATOR)).json()
    found: dict[str, Any] = snapshot.get("by_tenant", {}).get(tenant, {})
    return found


async def _batch_calls(sim: Any) -> list[str]:
    return [
        f"{r['method']} {r['path']}"
        for r in await sim.received()
        if r["path"].startswith("/v1/messages/batches")
    ]


async def test_a_tenants_batch_is_its_own_through_the_sdk_across_a_restart_charged_once(
    tmp_path: Path,
) -> None:
    tenants = _tenants_file(tmp_path)
    config = SimulatorConfig(reply_tokens=4, batch_processing_s=0.3)
    async with running_simulator(config) as sim, httpx2.AsyncClient(timeout=30) as http:
        settings = proxy_settings(
            sim,
            tenants_file=str(tenants),
            data_dir=str(tmp_path / "d"),
            metrics_enabled=True,
            metrics_token="mt-operator",
        )
        async with running_proxy(settings) as url:
            a = anthropic_client(url, api_key=KEYS["team-a"])
            b = anthropic_client(url, api_key=KEYS["team-b"])
            batch = await a.messages.batches.create(requests=_requests(3))
            doomed = await a.messages.batches.create(requests=_requests(1))
            assert batch.processing_status == "in_progress"
            assert batch.request_counts.processing == 3
            before = await _batch_calls(sim)
            # Another tenant's id is an unknown one, and never reaches the upstream.
            for call in (
                b.messages.batches.retrieve(batch.id),
                b.messages.batches.cancel(batch.id),
                b.messages.batches.delete(batch.id),
                b.messages.batches.results(batch.id),
            ):
                with pytest.raises(anthropic.NotFoundError) as other:
                    await call
                assert other.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
            assert await _batch_calls(sim) == before
            assert [x.id async for x in b.messages.batches.list()] == []
            assert [x.id async for x in a.messages.batches.list()] == [doomed.id, batch.id]

            canceled = await a.messages.batches.cancel(doomed.id)
            assert canceled.processing_status == "canceling"

            ended = await _until_ended(a, batch.id)
            assert ended.request_counts.succeeded == 3
            entries = [e async for e in await a.messages.batches.results(batch.id)]
            assert sorted(e.custom_id for e in entries) == ["r0", "r1", "r2"]
            assert all(e.result.type == "succeeded" for e in entries)
            tokens = {"input": 0, "output": 0}
            for e in entries:
                tokens["input"] += e.result.message.usage.input_tokens  # type: ignore[union-attr]
                tokens["output"] += e.result.message.usage.output_tokens  # type: ignore[union-attr]
            # Charged in the background (the retrieve that saw it ended) or as the results
            # streamed past, whichever came first: either way once.
            with trio.fail_after(10):
                while not (view := await _tenant_view(http, url, "team-a")).get("tokens"):  # noqa: ASYNC110
                    await trio.sleep(0.02)
            await trio.sleep(0.3)  # room for a second charge, were there one
            view = await _tenant_view(http, url, "team-a")
            assert view["tokens"]["output"] == tokens["output"] == 12
            assert view["tokens"]["input"] == tokens["input"]
            half_price = (tokens["input"] * 3 + tokens["output"] * 15) / 1e6 / 2  # sonnet 4.5
            assert view["estimated_cost_usd"] == pytest.approx(half_price)
            assert not (await _tenant_view(http, url, "team-b")).get("tokens")

        # A new gateway on the same data directory: the same owners, no second charge.
        async with running_proxy(settings) as url:
            a = anthropic_client(url, api_key=KEYS["team-a"])
            b = anthropic_client(url, api_key=KEYS["team-b"])
            assert (await a.messages.batches.retrieve(batch.id)).processing_status == "ended"
            with pytest.raises(anthropic.NotFoundError):
                await b.messages.batches.retrieve(batch.id)
            listed = await a.messages.batches.list(limit=1)
            assert [x.id for x in listed.data] == [doomed.id] and listed.has_more
            assert [x.id async for x in b.messages.batches.list()] == []
            assert len([e async for e in await a.messages.batches.results(batch.id)]) == 3
            await trio.sleep(0.3)
            assert not (await _tenant_view(http, url, "team-a")).get("tokens")

            deleted = await a.messages.batches.delete(batch.id)
            assert deleted.id == batch.id and deleted.type == "message_batch_deleted"
            with pytest.raises(anthropic.NotFoundError):
                await a.messages.batches.retrieve(batch.id)
            assert [x.id async for x in a.messages.batches.list()] == [doomed.id]
            snapshot = (await http.get(f"{url}/metrics", headers=OPERATOR)).json()
            assert snapshot["by_surface"]["anthropic.batches"]["requests"]["by_status"]["404"] == 2


async def test_pages_go_both_ways_newest_first(tmp_path: Path) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path / "d"))
        async with running_proxy(settings) as url:
            client = anthropic_client(url)
            made = [(await client.messages.batches.create(requests=_requests(1))).id]
            for _ in range(4):
                await trio.sleep(0.01)  # distinct creation times
                made.append((await client.messages.batches.create(requests=_requests(1))).id)
            newest_first = made[::-1]
            first = await client.messages.batches.list(limit=2)
            assert [x.id for x in first.data] == newest_first[:2] and first.has_more
            assert (first.first_id, first.last_id) == (newest_first[0], newest_first[1])
            assert [x.id async for x in client.messages.batches.list(limit=2)] == newest_first
            # before_id: the page just before a batch (newer ones), not the newest page.
            back = await client.messages.batches.list(limit=2, before_id=newest_first[4])
            assert [x.id for x in back.data] == newest_first[2:4]
            async with httpx2.AsyncClient() as http:
                bad = await http.get(f"{url}/v1/messages/batches?limit=0")
            assert bad.status_code == 400
            assert bad.json()["error"]["type"] == "invalid_request_error"


async def test_refusals_are_anthropic_shaped_and_reach_no_upstream(tmp_path: Path) -> None:
    tenants = _tenants_file(
        tmp_path,
        **{"limited": {"models": ["claude-haiku-*"]}, "capped": {"budget_usd": 0.0}},
    )
    async with running_simulator() as sim, httpx2.AsyncClient(timeout=30) as http:
        settings = proxy_settings(sim, tenants_file=str(tenants), data_dir=str(tmp_path / "d"))
        async with running_proxy(settings) as url:
            base = f"{url}/v1/messages/batches"
            body = {"requests": _requests(2)}
            nobody = await http.post(base, json=body)
            assert nobody.status_code == 401
            assert nobody.json()["error"]["type"] == "authentication_error"
            for path in ("", "/msgbatch_x", "/msgbatch_x/results"):
                assert (await http.get(base + path)).status_code == 401

            limited = anthropic_client(url, api_key=KEYS["limited"])
            with pytest.raises(anthropic.PermissionDeniedError) as denied:
                await limited.messages.batches.create(requests=_requests(2))
            assert "claude-sonnet-4-5" in denied.value.message
            allowed = await limited.messages.batches.create(
                requests=_requests(1, "claude-haiku-4-5"),
                extra_headers={"anthropic-beta": "some-beta-2026-01-01"},
            )
            assert allowed.id.startswith("msgbatch_")

            capped = anthropic_client(url, api_key=KEYS["capped"])
            with pytest.raises(anthropic.RateLimitError) as spent:
                await capped.messages.batches.create(requests=_requests(1))
            assert spent.value.response.headers["x-should-retry"] == "false"

            a = {"x-api-key": KEYS["team-a"], "anthropic-version": "2023-06-01"}
            for bad, param in (
                ({"requests": []}, "requests"),
                ({"requests": [{"custom_id": "a b", "params": {"model": SONNET}}]}, "custom_id"),
                ({"requests": [{"custom_id": "x", "params": {}}]}, "params.model"),
                (
                    {"requests": [{"custom_id": "x", "params": {"model": SONNET}}] * 2},
                    "unique",
                ),
            ):
                answer = await http.post(base, json=bad, headers=a)
                assert answer.status_code == 400, bad
                error = answer.json()["error"]
                assert error["type"] == "invalid_request_error" and param in error["message"]
            garbled = await http.post(base, content=b"{nope", headers=a)
            assert garbled.status_code == 400 and garbled.json()["type"] == "error"
        creates = [r for r in await sim.received() if r["method"] == "POST"]
        assert len(creates) == 1  # the allowed one only
        headers = dict(creates[0]["headers"])
        assert headers["x-api-key"] == SIM_KEY and headers["anthropic-beta"] == (
            "some-beta-2026-01-01"
        )
        assert KEYS["limited"] not in json.dumps(creates[0])


# -- a 100 MB results file passes with flat memory ------------------------------------------

_LINES = 10_000
_PAD = "x" * 10_000  # ~10 KB a line: ~100 MB in all
_USAGE = {"input_tokens": 10, "output_tokens": 5}


def _fake_upstream() -> QuartTrio:
    """An upstream with one ended batch whose results are ~100 MB, made as they are sent."""
    app = QuartTrio("fake-upstream")
    batch = {
        "id": "msgbatch_big",
        "type": "message_batch",
        "processing_status": "ended",
        "request_counts": {
            "processing": 0,
            "succeeded": _LINES,
            "errored": 0,
            "canceled": 0,
            "expired": 0,
        },
        "ended_at": "2026-01-01T00:00:00Z",
        "created_at": "2026-01-01T00:00:00Z",
        "expires_at": "2026-01-02T00:00:00Z",
        "archived_at": None,
        "cancel_initiated_at": None,
        "results_url": "http://unused/v1/messages/batches/msgbatch_big/results",
    }

    @app.post("/v1/messages/batches")
    async def create() -> Response:
        await request.get_data()
        return Response(json.dumps(batch), content_type="application/json")

    @app.get("/v1/messages/batches/<batch_id>")
    async def retrieve(batch_id: str) -> Response:
        return Response(json.dumps(batch), content_type="application/json")

    @app.get("/v1/messages/batches/<batch_id>/results")
    async def results(batch_id: str) -> Response:
        async def lines() -> AsyncIterator[bytes]:
            for i in range(_LINES):
                message = {
                    "id": f"msg_{i}",
                    "type": "message",
                    "role": "assistant",
                    "model": SONNET,
                    "content": [{"type": "text", "text": _PAD}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": _USAGE,
                }
                entry = {"custom_id": f"r{i}", "result": {"type": "succeeded", "message": message}}
                yield json.dumps(entry).encode() + b"\n"

        response = Response(lines(), content_type="application/binary")
        response.timeout = None
        return response

    return app


async def test_a_100_mb_results_file_streams_through_with_flat_memory(tmp_path: Path) -> None:
    fake = _fake_upstream()
    async with _hosting(lambda **kw: serve_app(fake, "127.0.0.1", 0, **kw)) as (host, port):
        settings = Settings(
            anthropic_base_url=f"http://{host}:{port}",
            anthropic_api_key="sk-fake",
            data_dir=str(tmp_path / "d"),
            metrics_enabled=True,
        )
        async with running_proxy(settings) as url, httpx2.AsyncClient(timeout=120) as http:
            created = await http.post(f"{url}/v1/messages/batches", json={"requests": _requests(1)})
            assert created.status_code == 200
            process = psutil.Process()
            gc.collect()
            baseline = peak = process.memory_info().rss
            received = 0
            async with http.stream(
                "GET", f"{url}/v1/messages/batches/msgbatch_big/results"
            ) as response:
                assert response.status_code == 200
                async for chunk in response.aiter_raw():
                    received += len(chunk)
                    peak = max(peak, process.memory_info().rss)
            growth = (peak - baseline) / 2**20
            print(f"\nresults {received / 2**20:.0f} MiB, RSS growth {growth:.1f} MiB")
            assert received > 100_000_000
            # The whole body held anywhere (gateway, fake upstream, client: one process)
            # would be 100 MB at least.
            assert growth < 30
            with trio.fail_after(10):  # charged once, from the stream's tally
                while True:
                    snapshot = (await http.get(f"{url}/metrics")).json()
                    tokens = snapshot["by_surface"].get("openai.batch", {}).get("tokens")
                    if tokens:
                        break
                    await trio.sleep(0.02)
            assert tokens["output"] == 5 * _LINES
