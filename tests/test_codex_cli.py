"""Codex CLI itself, through the Responses door: the real ``codex exec`` (npm
``@openai/codex``, pinned) against the in-process proxy and simulator over loopback.

What a user writes in ``$CODEX_HOME/config.toml`` (SURFACES.md section 2), and what these
tests write (with a fresh CODEX_HOME each time)::

    model = "claude-sonnet-4-5"
    model_provider = "gw"

    [model_providers.gw]
    name = "trio-batcher"
    base_url = "http://127.0.0.1:8000/v1"
    env_key = "GW_KEY"
    wire_api = "responses"

then ``GW_KEY=... codex exec --skip-git-repo-check "Say hello" < /dev/null``. The tests
also pass ``-c features.plugins=false -c analytics.enabled=false``, which keep Codex on
loopback (``codex_support.OFFLINE_OVERRIDES``).

Codex sits behind a recording relay (``codex_support.RecordingRelay``), so each test sees
both what Codex sent and what reached the simulated upstream, and checks one against the
other: Codex's ``developer`` messages are the system prompt, its function tools and its
``multi_agent_v1`` namespace (flattened to ``multi_agent_v1__<name>``) are the Anthropic
tools, and its inert ``web_search`` tool is dropped and named in
``x-trio-batcher-ignored-params``. Every request Codex makes must be answered 200: a 400 to
anything Codex sends shuts it out.

The simulated model calls a tool only when the user's words name it (``exec_command`` →
"command", ``simulator/reply_tools.py``), with an example input valid for the tool's schema:
``{"cmd": "cmd value"}``, which Codex runs in its read-only sandbox as ``bash -lc 'cmd
value'`` -- not a command (exit 127), so harmless.

The binary comes from ``tests/codex_support.py`` (``$TRIO_BATCHER_CODEX``, the project's
cached npm install, ``codex`` on PATH, or a one-time ``npm install``); without one the tests
skip, or fail under ``TRIO_BATCHER_REQUIRE_CODEX=1`` (CI).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
import trio
from codex_support import (
    KEY_ENV,
    OFFLINE_OVERRIDES,
    REQUIRE_ENV,
    Codex,
    Exchange,
    Finished,
    Unavailable,
    codex_env,
    describe_logs,
    dumps,
    find_codex,
    recording_relay,
    run_codex,
    sse_events,
    write_config,
)
from support import Sim, proxy_and_simulator

from trio_batcher.simulator.reply_text import first_words
from trio_batcher.simulator.reply_tools import user_texts

MODEL: Final = "claude-sonnet-4-5"
KEY: Final = "pk-test-codex"
SURFACE: Final = "openai.responses"
RUN_TIMEOUT_S: Final = 120.0  # a run takes about a second; the rest is room for a loaded machine


@pytest.fixture(scope="module")
def codex() -> Codex:
    try:
        return find_codex()
    except Unavailable as exc:
        reason = str(exc)
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1, but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return tmp_path


async def _codex_exec(
    codex: Codex, workdir: Path, prompt: str, *args: str
) -> tuple[Finished, list[Exchange], list[dict[str, Any]], dict[str, Any]]:
    """``codex exec`` against a fresh proxy and simulator, behind a recording relay.

    Returns what Codex printed, what it sent (and was answered), the Messages bodies the
    upstream received, and what the proxy counted on the Responses surface.
    """
    async with (
        proxy_and_simulator(
            proxy_api_keys=(KEY,), metrics_enabled=True, metrics_token="mt-codex"
        ) as (url, sim),
        recording_relay(url) as (relay_url, relay),
    ):
        write_config(workdir / "home", f"{relay_url}/v1", MODEL)
        overrides = [arg for o in OFFLINE_OVERRIDES for arg in ("-c", o)]
        argv = ["exec", *overrides, "--skip-git-repo-check", *args, prompt]
        env = codex_env(workdir / "home", **{KEY_ENV: KEY})
        try:
            with trio.fail_after(RUN_TIMEOUT_S):
                finished = await run_codex(codex, argv, env, workdir / "work", workdir / "logs")
        except trio.TooSlowError:
            raise AssertionError(
                f"codex {' '.join(argv)!r} did not finish within {RUN_TIMEOUT_S:.0f} s\n"
                + describe_logs(workdir / "logs")
            ) from None
        upstream = await _upstream_bodies(sim)
        async with httpx2.AsyncClient() as http:
            metrics = (
                await http.get(f"{url}/metrics", headers={"Authorization": "Bearer mt-codex"})
            ).json()
    counted = metrics["by_surface"][SURFACE]["requests"]
    return finished, list(relay.exchanges), upstream, counted


async def _upstream_bodies(sim: Sim) -> list[dict[str, Any]]:
    bodies = []
    for entry in await sim.received():
        assert (entry["path"], entry["status"]) == ("/v1/messages", 200), dumps(entry)
        bodies.append(entry["json"])
    return bodies


def _assert_every_request_answered(
    finished: Finished, exchanges: list[Exchange], counted: dict[str, Any], turns: int
) -> None:
    assert finished.returncode == 0, finished.describe()
    summary = [(e.method, e.path, e.status) for e in exchanges]
    assert summary == [("POST", "/v1/responses", 200)] * turns, (summary, finished.describe())
    assert (counted["total"], counted["success"], counted["stream"]) == (turns,) * 3, counted


def _final_text(exchange: Exchange) -> str:
    """The assistant text of the streamed response's ``response.completed`` event."""
    events = sse_events(exchange.response_body)
    assert events[-1]["type"] == "response.completed", [e["type"] for e in events]
    output = events[-1]["response"]["output"]
    return "".join(
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def _assert_translated(request: dict[str, Any], ignored: str, upstream: dict[str, Any]) -> None:
    """``upstream`` (a Messages body) is ``request`` (what Codex sent) translated."""
    # Codex's system prompt comes as developer messages, not `instructions`.
    assert "instructions" not in request
    developer = [
        part["text"]
        for item in request["input"]
        if item.get("type") == "message" and item["role"] == "developer"
        for part in item["content"]
    ]
    assert developer, dumps(request["input"])
    assert [b["text"] for b in upstream["system"]] == developer
    assert all(m["role"] in ("user", "assistant") for m in upstream["messages"])

    # Its tools: flat function tools as they are, namespaced ones flattened, web search
    # (without external access) dropped and named.
    expected: list[str] = []
    dropped: list[str] = []
    for i, tool in enumerate(request["tools"]):
        if tool["type"] == "function":
            expected.append(tool["name"])
        elif tool["type"] == "namespace":
            expected.extend(f"{tool['name']}__{member['name']}" for member in tool["tools"])
        else:
            assert tool == {"type": "web_search", "external_web_access": False}, tool
            dropped.append(f"tools[{i}]")
    assert [t["name"] for t in upstream["tools"]] == expected
    assert any(name.startswith("multi_agent_v1__") for name in expected), expected
    assert dropped and set(dropped) <= set(ignored.split(",")), ignored
    by_name = {t["name"]: t for t in upstream["tools"]}
    for tool in request["tools"]:
        if tool["type"] == "function":
            assert by_name[tool["name"]]["input_schema"] == tool["parameters"], tool["name"]


def _assert_codex_request_shape(exchange: Exchange) -> None:
    """What Codex 0.169.0 sends (SURFACES.md section 2, "observed")."""
    request = exchange.body
    assert request["model"] == MODEL
    assert (request["stream"], request["store"]) == (True, False)
    assert request["include"] == ["reasoning.encrypted_content"]
    assert (request["tool_choice"], request["parallel_tool_calls"]) == ("auto", True)
    assert exchange.headers["authorization"] == f"Bearer {KEY}"
    assert exchange.headers["originator"] == "codex_exec"
    assert exchange.headers["accept"] == "text/event-stream"
    assert {"session-id", "thread-id", "x-client-request-id"} <= set(exchange.headers)


async def test_codex_exec_answers_through_the_gateway(codex: Codex, workdir: Path) -> None:
    prompt = "Say hello"
    finished, exchanges, upstream, counted = await _codex_exec(codex, workdir, prompt)
    _assert_every_request_answered(finished, exchanges, counted, turns=1)
    (exchange,) = exchanges
    _assert_codex_request_shape(exchange)
    (body,) = upstream
    _assert_translated(
        exchange.body, exchange.response_headers["x-trio-batcher-ignored-params"], body
    )
    assert body["stream"] is True
    # The user's words are the last user turn (after Codex's <environment_context>) ...
    last = body["messages"][-1]
    assert last["role"] == "user" and last["content"][-1] == {"type": "text", "text": prompt}
    # ... and the simulated model's answer, which echoes that turn's first words, is what
    # Codex prints.
    answer = _final_text(exchange)
    assert answer.startswith(f"Simulated reply to '{first_words(user_texts(body))}':"), answer
    assert answer in finished.stdout, finished.describe()


async def test_codex_runs_its_shell_tool_and_answers_from_the_output(
    codex: Codex, workdir: Path
) -> None:
    finished, exchanges, upstream, counted = await _codex_exec(
        codex, workdir, "Run the echo command", "--sandbox", "read-only"
    )
    _assert_every_request_answered(finished, exchanges, counted, turns=2)
    first, second = exchanges
    for exchange, body in zip(exchanges, upstream, strict=True):
        _assert_codex_request_shape(exchange)
        ignored = exchange.response_headers["x-trio-batcher-ignored-params"]
        _assert_translated(exchange.body, ignored, body)

    # Turn 1: the model calls exec_command, streamed to Codex as a function_call.
    calls = [
        e["item"]
        for e in sse_events(first.response_body)
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    ]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("exec_command", {"cmd": "cmd value"})
    ], dumps(calls)
    (call,) = calls

    # Turn 2: Codex sends the whole history back (store: false), with the call and its output.
    items = second.body["input"]
    (echoed,) = [i for i in items if i.get("type") == "function_call"]
    (output,) = [i for i in items if i.get("type") == "function_call_output"]
    assert (echoed["call_id"], echoed["name"]) == (call["call_id"], "exec_command")
    assert output["call_id"] == call["call_id"]
    assert isinstance(output["output"], str) and output["output"]

    # ... which reached the upstream as a tool_use and its tool_result.
    assistant, results = upstream[1]["messages"][-2:]
    (tool_use,) = [b for b in assistant["content"] if b["type"] == "tool_use"]
    (tool_result,) = results["content"]
    assert (tool_use["id"], tool_use["name"], tool_use["input"]) == (
        call["call_id"],
        "exec_command",
        {"cmd": "cmd value"},
    )
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == tool_use["id"]
    content = tool_result["content"]
    text = content if isinstance(content, str) else "".join(b["text"] for b in content)
    assert text == output["output"]

    # The answer talks about the result, and is what Codex prints.
    answer = _final_text(second)
    assert answer.startswith("Simulated reply using 1 tool result(s):"), answer
    assert answer in finished.stdout, finished.describe()
