"""Many upstreams, live: the gateway routing among simulated Anthropic upstreams over loopback.

Each upstream is its own simulator (its own state, its own trace), named in an
``UPSTREAMS_FILE`` the test writes; what each one received is read from its own
``/_sim/requests`` and ``/_sim/stats``, so every claim is about what reached which upstream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from support import SIM_KEY, Sim, running_proxy, running_simulator

from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig

MODEL = "claude-sonnet-4-5"


def upstreams_toml(sims: Sequence[Sim], **fields: Sequence[Any]) -> str:
    """An upstreams file naming each simulator ``up0``, ``up1``...; ``fields`` gives each
    a value per upstream (``weight=[3, 1]``)."""
    tables = []
    for i, sim in enumerate(sims):
        lines = [
            "[[upstream]]",
            f'name = "up{i}"',
            'kind = "anthropic"',
            f'base_url = "{sim.url}"',
            f'api_key_env = "FLEET_KEY_{i}"',
        ]
        lines += [f"{name} = {json.dumps(values[i])}" for name, values in fields.items()]
        tables.append("\n".join(lines))
    return "\n\n".join(tables) + "\n"


@asynccontextmanager
async def fleet(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    configs: Sequence[SimulatorConfig],
    settings: dict[str, Any] | None = None,
    **fields: Sequence[Any],
) -> AsyncIterator[tuple[str, list[Sim]]]:
    async with AsyncExitStack() as stack:
        sims = [await stack.enter_async_context(running_simulator(c)) for c in configs]
        for i in range(len(sims)):
            monkeypatch.setenv(f"FLEET_KEY_{i}", SIM_KEY)
        path = tmp_path / "upstreams.toml"
        path.write_text(upstreams_toml(sims, **fields))
        proxy = Settings(
            upstreams_file=str(path),
            data_dir=str(tmp_path / "data"),
            metrics_enabled=True,
            **(settings or {}),
        )
        url = await stack.enter_async_context(running_proxy(proxy))
        yield url, sims


def _http() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(timeout=30)


async def _chat(http: httpx2.AsyncClient, url: str, text: str, stream: bool) -> httpx2.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": stream}
    return await http.post(f"{url}/v1/chat/completions", json=body)


async def _messages(
    http: httpx2.AsyncClient, url: str, messages: list[dict[str, Any]], stream: bool = False
) -> httpx2.Response:
    body = {"model": MODEL, "max_tokens": 64, "messages": messages, "stream": stream}
    return await http.post(
        f"{url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
    )


async def _served(sim: Sim) -> int:
    return int((await sim.stats())["by_status"].get("200", 0))


async def test_a_529_storm_on_one_upstream_is_served_by_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storm = SimulatorConfig(rate_529=1.0, retry_after_s=30)
    async with fleet(tmp_path, monkeypatch, [storm, SimulatorConfig()]) as (url, (bad, good)):
        async with _http() as http:
            for stream in (False, True):
                chat = await _chat(http, url, "hello", stream)
                assert chat.status_code == 200, chat.text
                if stream:
                    assert "[DONE]" in chat.text
                native = await _messages(
                    http, url, [{"role": "user", "content": "hi"}], stream=stream
                )
                assert native.status_code == 200, native.text
                if stream:
                    assert "event: message_stop" in native.text
            metrics = (await http.get(f"{url}/metrics")).json()
        # The storm was tried once: its 529 and retry-after put it in cooldown, and the
        # three requests after the first went straight to the healthy upstream.
        assert (await bad.stats())["by_status"] == {"529": 1}
        assert await _served(good) == 4
        assert metrics["requests"]["error"] == 0, metrics.get("requests", metrics)
        assert metrics["routing"]["failovers_by_cause"] == {"overloaded": 1}
        assert metrics["routing"]["failovers"] == [{"from": "up0", "to": "up1", "count": 1}]
        assert metrics["by_upstream"]["up1"]["requests"] == 4
        assert metrics["by_upstream"]["up0"]["attempts_by_outcome"] == {"overloaded": 1}


async def test_the_failed_upstream_is_tried_again_only_after_its_cooldown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 529 with ``retry-after: 1``: the upstream gets no request for that second, then
    one (it is healthy by weight again), which fails over again while the storm lasts."""
    storm = SimulatorConfig(rate_529=1.0, retry_after_s=1)
    async with fleet(tmp_path, monkeypatch, [storm, SimulatorConfig()]) as (url, (bad, good)):
        async with _http() as http:
            with trio.fail_after(20):
                n = 0
                while len(await bad.received()) < 2:
                    n += 1  # a new conversation each time: affinity would keep one on up1
                    response = await _chat(http, url, f"conversation {n}", False)
                    assert response.status_code == 200, response.text
                    await trio.sleep(0.05)
        times = [entry["received_at"] for entry in await bad.received()]
        assert times[1] - times[0] >= 1.0
        assert await _served(good) >= 2


async def test_a_529_without_retry_after_makes_the_upstream_unhealthy_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anthropic's 529s usually carry no retry-after: the failover still keeps the next
    requests off the failed upstream (its health), for at least a second."""
    storm = SimulatorConfig(rate_529=1.0, retry_after_s=0)
    async with fleet(tmp_path, monkeypatch, [storm, SimulatorConfig()]) as (url, (bad, good)):
        async with _http() as http:
            for n in range(6):
                response = await _chat(http, url, f"no retry-after {n}", False)
                assert response.status_code == 200, response.text
        assert len(await bad.received()) == 1
        assert await _served(good) == 6


async def test_when_every_upstream_fails_the_client_gets_the_last_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storms = [SimulatorConfig(rate_529=1.0, retry_after_s=30)] * 2
    quick = {"request_timeout_s": 10.0}  # shorter than the cooldowns: shed, not waited out
    async with fleet(tmp_path, monkeypatch, storms, settings=quick) as (url, sims):
        async with _http() as http:
            response = await _messages(http, url, [{"role": "user", "content": "hi"}])
            assert response.status_code == 529
            assert response.json()["error"]["type"] == "overloaded_error"
            # Both are cooling down now, for longer than the request may wait.
            again = await _chat(http, url, "hi", False)
            assert again.status_code == 503
            assert int(again.headers["retry-after"]) > 1
        assert [len(await sim.received()) for sim in sims] == [1, 1]


async def test_failover_is_a_retry_and_none_happens_with_retries_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storm = SimulatorConfig(rate_529=1.0, retry_after_s=30)
    async with fleet(
        tmp_path,
        monkeypatch,
        [storm, SimulatorConfig()],
        settings={"upstream_max_retries": 0},
    ) as (url, (bad, good)):
        async with _http() as http:
            first = await _chat(http, url, "hi", False)
            assert first.status_code == 529 or first.status_code == 503
            second = await _chat(http, url, "hi", False)  # up0 is cooling: up1 serves
            assert second.status_code == 200
        assert len(await bad.received()) == 1
        assert len(await good.received()) == 1


async def test_turns_of_a_conversation_stay_on_one_upstream_and_new_ones_follow_weight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 conversations x 4 turns, weights 3 and 1: every conversation's turns on one
    upstream, the new conversations split exactly 12 and 4."""
    configs = [SimulatorConfig(), SimulatorConfig()]
    async with fleet(tmp_path, monkeypatch, configs, weight=[3, 1]) as (url, sims):
        histories: list[list[dict[str, Any]]] = [
            [{"role": "user", "content": f"conversation {c}: hello"}] for c in range(16)
        ]
        async with _http() as http:
            for _turn in range(4):
                for history in histories:
                    response = await _messages(http, url, history)
                    assert response.status_code == 200, response.text
                    history.append({"role": "assistant", "content": response.json()["content"]})
                    history.append({"role": "user", "content": "and then?"})
            metrics = (await http.get(f"{url}/metrics")).json()
        where: dict[str, set[int]] = {}
        for index, sim in enumerate(sims):
            for entry in await sim.received():
                body = json.loads(entry["body"])
                first = body["messages"][0]["content"]
                where.setdefault(first, set()).add(index)
        assert len(where) == 16
        assert all(len(upstreams) == 1 for upstreams in where.values()), where
        counts = [sum(1 for u in where.values() if u == {i}) for i in range(2)]
        assert counts == [12, 4]
        assert metrics["requests"]["total"] == 64
        affinity = metrics["routing"]["affinity"]
        assert (affinity["continuing_turns"], affinity["kept"]) == (48, 48)
        assert [metrics["by_upstream"][f"up{i}"]["requests"] for i in range(2)] == [48, 16]


async def test_each_upstream_cap_holds_under_concurrency_and_both_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = SimulatorConfig(ttft_ms=300)
    async with fleet(tmp_path, monkeypatch, [slow, slow], max_concurrency=[2, 3]) as (url, sims):
        async with _http() as http:
            statuses: list[int] = []

            async def one(i: int) -> None:
                response = await _chat(http, url, f"slow call {i}", False)
                statuses.append(response.status_code)

            async with trio.open_nursery() as nursery:
                for i in range(15):
                    nursery.start_soon(one, i)
        assert statuses == [200] * 15
        stats = [await sim.stats() for sim in sims]
        assert [s["max_in_flight"] for s in stats] == [2, 3]
        assert sum(int(s["by_status"]["200"]) for s in stats) == 15
        assert all(int(s["by_status"]["200"]) > 0 for s in stats)
