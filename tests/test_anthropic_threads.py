"""Message threads (beta ``message-threads-2026-08-12``) through the native Messages door.

The ``anthropic`` SDK's default tool runner threads its turns: the first request creates a
thread (``thread: {"type": "create"}``), each later one continues it with only the new
messages and none of ``system`` / ``tools``. Over real loopback, against the simulator
(which now holds threads): the loop completes through the gateway, each thread is its
creator's (another tenant's ``continue`` is Anthropic's 404 ``thread_not_found`` and never
reaches an upstream), ownership survives a restart, and a ``continue`` goes to the upstream
that holds the thread.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic import beta_async_tool
from support import (
    SIM_KEY,
    Sim,
    anthropic_client,
    proxy_settings,
    running_proxy,
    running_simulator,
)
from test_fleet_live import upstreams_toml
from test_tenants_live import KEYS, _tenants_file

from trio_batcher.settings import Settings

MODEL = "claude-sonnet-4-5"
BETA = "message-threads-2026-08-12"
ASK = "What is the weather and the local time in Paris? Use get_weather and get_time."


@beta_async_tool
async def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name.
    """
    return f"sunny in {city}"


@beta_async_tool
async def get_time(city: str) -> str:
    """The local time in a city.

    Args:
        city: the city's name.
    """
    return f"noon in {city}"


async def _messages(sim: Sim) -> list[dict[str, Any]]:
    """The Messages requests an upstream received, oldest first."""
    return [r for r in await sim.received() if r["path"] == "/v1/messages"]


def _betas(entry: dict[str, Any]) -> str:
    return ",".join(v for k, v in entry["headers"] if k.lower() == "anthropic-beta")


async def _create(client: Any, text: str = "Hello there") -> Any:
    """One turn that creates a thread."""
    return await client.beta.messages.create(
        model=MODEL,
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": text}],
        thread={"type": "create"},
        betas=[BETA],
    )


async def _continue(client: Any, previous: str, text: str = "And then?") -> Any:
    """One turn that continues the thread whose last reply is ``previous``."""
    return await client.beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": text}],
        thread={"type": "continue", "previous_message_id": previous},
        betas=[BETA],
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_the_sdks_default_tool_runner_completes_a_two_tool_loop_in_a_thread(
    tmp_path: Path, stream: bool
) -> None:
    async with (
        running_simulator() as sim,
        running_proxy(proxy_settings(sim, data_dir=str(tmp_path / "d"))) as url,
    ):
        client = anthropic_client(url)
        runner = client.beta.messages.tool_runner(
            model=MODEL,
            max_tokens=512,
            system="Use the tools you are given.",
            tools=[get_weather, get_time],
            messages=[{"role": "user", "content": ASK}],
            stream=stream,
        )
        if stream:
            replies = []
            async for message_stream in runner:
                replies.append(await message_stream.get_final_message())
        else:
            replies = [message async for message in runner]
        first, last = replies[0], replies[-1]
        assert len(replies) == 2
        assert sorted(b.name for b in first.content if b.type == "tool_use") == [
            "get_time",
            "get_weather",
        ]
        assert last.stop_reason == "end_turn"
        assert "tool result" in last.content[0].text  # it read both tools' results
        create, follow = await _messages(sim)
        assert BETA in _betas(create) and BETA in _betas(follow)
        assert create["json"]["thread"] == {"type": "create"}
        assert {"system", "tools"} <= create["json"].keys()
        # Threads on by default: the second turn sent only the tool results.
        assert follow["json"]["thread"] == {"type": "continue", "previous_message_id": first.id}
        assert not {"system", "tools"} & follow["json"].keys()
        [results] = follow["json"]["messages"]
        assert [b["type"] for b in results["content"]] == ["tool_result", "tool_result"]


@asynccontextmanager
async def _tenants_gateway(sim: Sim, tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    settings = proxy_settings(
        sim, tenants_file=str(_tenants_file(tmp_path)), data_dir=str(tmp_path / "d")
    )
    async with running_proxy(settings) as url:
        yield (
            anthropic_client(url, api_key=KEYS["team-a"]),
            anthropic_client(url, api_key=KEYS["team-b"]),
        )


async def test_another_tenants_thread_is_not_found_and_ownership_survives_a_restart(
    tmp_path: Path,
) -> None:
    async with running_simulator() as sim:
        async with _tenants_gateway(sim, tmp_path) as (team_a, team_b):
            first = await _create(team_a)
            second = await _continue(team_a, first.id)
            assert len(await _messages(sim)) == 2
            # team-b names team-a's reply: answered as a thread that does not exist,
            # before any upstream call; so is an id nobody made.
            for previous in (second.id, "msg_never_made"):
                with pytest.raises(anthropic.NotFoundError) as refused:
                    await _continue(team_b, previous, "What did they say?")
                assert refused.value.status_code == 404
                assert refused.value.error_code == "thread_not_found"
                assert refused.value.body["error"]["type"] == "not_found_error"
            assert len(await _messages(sim)) == 2
        async with _tenants_gateway(sim, tmp_path) as (team_a, team_b):
            with pytest.raises(anthropic.NotFoundError):
                await _continue(team_b, second.id)
            third = await _continue(team_a, second.id)  # still team-a's after the restart
            assert third.stop_reason == "end_turn"
            sent = await _messages(sim)
            assert len(sent) == 3
            assert sent[-1]["json"]["thread"]["previous_message_id"] == second.id


async def test_a_thread_turn_in_a_stream_is_recorded_for_its_tenant(tmp_path: Path) -> None:
    async with running_simulator() as sim, _tenants_gateway(sim, tmp_path) as (team_a, team_b):
        async with team_a.beta.messages.stream(
            model=MODEL,
            max_tokens=64,
            messages=[{"role": "user", "content": "Hello"}],
            thread={"type": "create"},
            betas=[BETA],
        ) as stream:
            streamed = await stream.get_final_message()
        with pytest.raises(anthropic.NotFoundError):
            await _continue(team_b, streamed.id)
        assert (await _continue(team_a, streamed.id)).stop_reason == "end_turn"


async def test_a_malformed_thread_is_refused_before_the_upstream(tmp_path: Path) -> None:
    async with (
        running_simulator() as sim,
        running_proxy(proxy_settings(sim, data_dir=str(tmp_path / "d"))) as url,
        httpx2.AsyncClient(timeout=30) as http,
    ):
        body = {
            "model": MODEL,
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
            "thread": {"type": "continue"},
        }
        refused = await http.post(f"{url}/v1/messages", json=body, headers={"anthropic-beta": BETA})
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "invalid_request_error"
        assert await _messages(sim) == []


@asynccontextmanager
async def _two_upstreams(
    sims: Sequence[Sim], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, priority: list[int]
) -> AsyncIterator[Any]:
    for i in range(len(sims)):
        monkeypatch.setenv(f"FLEET_KEY_{i}", SIM_KEY)
    path = tmp_path / "upstreams.toml"
    path.write_text(upstreams_toml(sims, priority=priority))
    settings = Settings(upstreams_file=str(path), data_dir=str(tmp_path / "data"))
    async with running_proxy(settings) as url:
        yield anthropic_client(url)


async def test_a_continue_goes_to_the_upstream_that_holds_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncExitStack() as stack:
        sims = [await stack.enter_async_context(running_simulator()) for _ in range(2)]
        # up0 is preferred while the thread is created; after a restart up1 is. Routed
        # freely, the continue would go to up1, which does not hold the thread.
        async with _two_upstreams(sims, tmp_path, monkeypatch, [0, 1]) as client:
            first = await _create(client)
        async with _two_upstreams(sims, tmp_path, monkeypatch, [1, 0]) as client:
            plain = await client.messages.create(
                model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
            second = await _continue(client, first.id)
            third = await _continue(client, second.id)
        assert plain.id and third.stop_reason == "end_turn"
        up0, up1 = [await _messages(s) for s in sims]
        assert [r["json"].get("thread", {}).get("type") for r in up0] == [
            "create",
            "continue",
            "continue",
        ]
        assert [json.dumps(r["json"].get("thread")) for r in up1] == ["null"]  # the plain one
