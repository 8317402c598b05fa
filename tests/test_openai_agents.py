"""The OpenAI Agents SDK (``openai-agents``) through the Responses door: an ``Agent`` on the
SDK's default model class (``OpenAIResponsesModel``), with one ``@function_tool``, against
the proxy and the simulator over loopback -- what a user gets from::

    set_default_openai_client(AsyncOpenAI(base_url="http://gateway/v1", api_key=...))
    set_tracing_disabled(True)
    await Runner.run(Agent(name=..., model="claude-...", tools=[get_weather]), "...")

The simulated model calls a tool under ``tool_choice: auto`` only when the user's words
name it (``get_weather`` → "weather", ``simulator/reply_tools.py``), with an example input
valid for the tool's schema; the agent runs the tool, sends its output back, and the model
answers from the result.

The SDK is asyncio-only, and these tests run under trio (``trio_mode``): the servers run
in the test's nursery, and each agent run gets an asyncio loop of its own in a worker
thread (``asyncio.run`` under ``trio.to_thread.run_sync``). Nothing crosses between the two
loops but the finished result; the loopback sockets are the only link, as with a real
client. The deadline lives inside the asyncio loop (``asyncio.timeout``), since a trio
cancel scope cannot interrupt a thread. Skips when ``agents`` is not installed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import httpx2
import pytest
import trio
from support import Sim, proxy_and_simulator

agents = pytest.importorskip("agents")

from agents import (  # noqa: E402 -- after the importorskip that guards it
    Agent,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.models import _openai_shared  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

MODEL: Final = "claude-sonnet-4-5"
KEY: Final = "unused"  # the proxy runs without PROXY_API_KEYS here
PROMPT: Final = "What is the weather in Paris?"
RUN_TIMEOUT_S: Final = 60.0  # a run takes well under a second; the rest is a loaded machine

T = TypeVar("T")


@dataclass
class Calls:
    """What the tool was called with, in order (appended from the agent's thread)."""

    cities: list[str] = field(default_factory=list)


def _weather_agent(calls: Calls) -> Any:
    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
          city: the city's name.
        """
        calls.cities.append(city)
        return f"Sunny and 21 degrees in {city}."

    # The model is a name: the SDK's default provider makes it an OpenAIResponsesModel on
    # the default client, as for any user who calls set_default_openai_client.
    return Agent(
        name="Forecaster",
        instructions="Answer with the weather.",
        model=MODEL,
        tools=[get_weather],
    )


async def _in_asyncio(url: str, run: Callable[[], Awaitable[T]]) -> T:
    """``run()`` in a fresh asyncio loop in a worker thread, with the SDK's default client
    pointed at ``url`` (and restored afterwards: it is process-wide state)."""

    async def main() -> T:
        previous = _openai_shared.get_default_openai_client()
        async with AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0) as client:
            set_default_openai_client(client, use_for_tracing=False)
            try:
                async with asyncio.timeout(RUN_TIMEOUT_S):
                    return await run()
            finally:
                _openai_shared.set_default_openai_client(previous)  # type: ignore[arg-type]

    set_tracing_disabled(True)
    # The coroutine is made in the worker thread, so it is never left un-awaited here.
    return await trio.to_thread.run_sync(lambda: asyncio.run(main()))


async def _responses_requests(url: str) -> dict[str, Any]:
    """``by_surface["openai.responses"].requests`` of the proxy's ``GET /metrics``."""
    async with httpx2.AsyncClient() as http:
        metrics = (await http.get(f"{url}/metrics")).json()
    requests: dict[str, Any] = metrics["by_surface"]["openai.responses"]["requests"]
    return requests


async def _upstream_messages(sim: Sim) -> list[dict[str, Any]]:
    bodies = []
    for entry in await sim.received():
        assert entry["path"] == "/v1/messages", entry["path"]
        assert entry["status"] == 200, entry
        bodies.append(entry["json"])
    return bodies


def _assert_tool_round_trip(bodies: list[dict[str, Any]], calls: Calls, answer: str) -> None:
    """Two upstream requests: the question (tool offered), then the question, the model's
    ``tool_use`` and the tool's ``tool_result``; the tool ran with the model's input."""
    assert len(bodies) == 2, json.dumps(bodies, indent=1)[:3000]
    first, second = bodies
    assert [t["name"] for t in first["tools"]] == ["get_weather"]
    assert first["system"] in (
        "Answer with the weather.",
        [{"type": "text", "text": "Answer with the weather."}],
    ), first["system"]
    assert first["messages"][-1]["role"] == "user"

    assistant, results = second["messages"][-2:]
    assert assistant["role"] == "assistant" and results["role"] == "user"
    (tool_use,) = [b for b in assistant["content"] if b["type"] == "tool_use"]
    (tool_result,) = [b for b in results["content"] if b["type"] == "tool_result"]
    assert tool_use["name"] == "get_weather"
    assert tool_result["tool_use_id"] == tool_use["id"]
    # The tool ran once, with what the (simulated) model generated ...
    assert calls.cities == [tool_use["input"]["city"]]
    # ... and its output went back upstream as the result.
    content = tool_result["content"]
    text = content if isinstance(content, str) else "".join(b["text"] for b in content)
    assert text == f"Sunny and 21 degrees in {calls.cities[0]}."
    # The final answer talks about that result (simulator/replies.py).
    assert answer.startswith("Simulated reply using 1 tool result(s): 'Sunny and 21"), answer


async def test_an_agent_calls_its_function_tool_and_answers_through_the_gateway() -> None:
    calls = Calls()
    async with proxy_and_simulator(metrics_enabled=True) as (url, sim):
        result = await _in_asyncio(url, lambda: Runner.run(_weather_agent(calls), PROMPT))
        bodies = await _upstream_messages(sim)
        counted = await _responses_requests(url)
    # Both turns came in by the Responses door (the SDK's default model), not streamed.
    assert (counted["total"], counted["success"], counted["stream"]) == (2, 2, 0), counted
    assert isinstance(result.final_output, str) and result.final_output
    _assert_tool_round_trip(bodies, calls, result.final_output)
    # The SDK saw one tool call and one tool output, both by the Responses door.
    kinds = [item.type for item in result.new_items]
    assert kinds.count("tool_call_item") == 1 and kinds.count("tool_call_output_item") == 1, kinds


async def test_a_streamed_agent_run_calls_its_tool_and_streams_the_answer() -> None:
    calls = Calls()

    async def streamed() -> tuple[Any, list[str]]:
        result = Runner.run_streamed(_weather_agent(calls), PROMPT)
        deltas: list[str] = []
        async for event in result.stream_events():
            if event.type == "raw_response_event" and event.data.type == (
                "response.output_text.delta"
            ):
                deltas.append(event.data.delta)
        return result, deltas

    async with proxy_and_simulator(metrics_enabled=True) as (url, sim):
        result, deltas = await _in_asyncio(url, streamed)
        bodies = await _upstream_messages(sim)
        counted = await _responses_requests(url)
    assert (counted["total"], counted["success"], counted["stream"]) == (2, 2, 2), counted
    assert all(b.get("stream") is True for b in bodies), [b.get("stream") for b in bodies]
    assert isinstance(result.final_output, str) and result.final_output
    _assert_tool_round_trip(bodies, calls, result.final_output)
    # The answer arrived in pieces, and they add up to it.
    assert len(deltas) > 1 and "".join(deltas).endswith(result.final_output), deltas
