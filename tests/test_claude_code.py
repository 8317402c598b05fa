"""Claude Code itself, through the gateway: the real ``claude`` binary against
``trio-batcher serve --simulate``, both as child processes over loopback.

What a user runs, and what these tests run (with a fresh HOME each time)::

    PROXY_API_KEYS=pk-test-claude METRICS_ENABLED=1 trio-batcher serve --simulate --port 8000
    ANTHROPIC_BASE_URL=http://127.0.0.1:8000 ANTHROPIC_API_KEY=pk-test-claude \\
    DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 \\
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \\
      claude -p "Say hello" < /dev/null

(``ANTHROPIC_AUTH_TOKEN`` works in place of ``ANTHROPIC_API_KEY``.) The four ``DISABLE_*``
variables keep Claude Code on loopback; without them it also calls api.anthropic.com itself.

Claude Code offers its whole toolbox on every turn; the simulated model, like a real one,
calls only the tools the user's words ask for (``simulator/reply_tools.py``), so a greeting
gets one answer and "read ..." a ``Read`` call, its result, and an answer.

The binary comes from ``tests/claude_code_support.py`` (``$TRIO_BATCHER_CLAUDE_CODE``, the
project's cached npm install, ``claude`` on PATH, or a one-time ``npm install``); without one
the tests skip, or fail under ``TRIO_BATCHER_REQUIRE_CLAUDE_CODE=1`` (CI).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from claude_code_support import (
    REQUIRE_ENV,
    ClaudeCode,
    Finished,
    Gateway,
    Unavailable,
    claude_env,
    delta,
    dumps,
    find_claude_code,
    run_claude,
    running_gateway,
    surface_requests,
)

KEY = "pk-test-claude"
SURFACE = "anthropic.messages"
PROMPT = "Say hello"
# The simulator's text reply (trio_batcher/simulator/replies.py, build_reply): it echoes
# the first words of the last user turn; Claude Code's own reminders there are not echoed.
ANSWER_PREFIX = f"Simulated reply to '{PROMPT}':"
TOOL_ANSWER_PREFIX = "Simulated reply using "
RUN_TIMEOUT_S = 120.0  # a run takes about a second; the rest is room for a loaded machine
REFUSED_TIMEOUT_S = 60.0  # a retrying client would still be backing off after this


@pytest.fixture(scope="module")
def claude_code() -> ClaudeCode:
    try:
        return find_claude_code()
    except Unavailable as exc:
        reason = str(exc)
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1, but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def gateway(claude_code: ClaudeCode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway for the module (asks for ``claude_code`` first, so it is not started
    just to be skipped); each test reads the metrics before and after its run."""
    del claude_code
    with running_gateway(KEY, tmp_path_factory.mktemp("gateway")) as running:
        yield running


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return tmp_path


def _claude(
    claude_code: ClaudeCode,
    gateway: Gateway,
    workdir: Path,
    *args: str,
    prompt: str = PROMPT,
    timeout: float = RUN_TIMEOUT_S,
    **credentials: str,
) -> tuple[Finished, dict[str, Any]]:
    """Run ``claude -p prompt *args`` against ``gateway``; also return what the gateway
    counted on the Messages surface meanwhile."""
    env = claude_env(workdir / "home", ANTHROPIC_BASE_URL=gateway.url, **credentials)
    before = surface_requests(gateway.metrics(), SURFACE)
    finished = run_claude(
        claude_code, ["-p", prompt, *args], env, workdir / "work", timeout=timeout
    )
    counted = delta(surface_requests(gateway.metrics(), SURFACE), before)
    return finished, counted


def _assert_answered(finished: Finished, counted: dict[str, Any], prefix: str) -> None:
    assert finished.returncode == 0, finished.describe()
    assert finished.stdout.strip().startswith(prefix), finished.describe()
    # Every request it made came in by the Messages door, streamed, and was answered.
    assert counted["total"] >= 1, dumps(counted)
    assert counted["success"] == counted["total"] == counted["stream"], dumps(counted)


def test_claude_code_answers_through_the_gateway_with_an_api_key(
    claude_code: ClaudeCode, gateway: Gateway, workdir: Path
) -> None:
    finished, counted = _claude(claude_code, gateway, workdir, ANTHROPIC_API_KEY=KEY)
    _assert_answered(finished, counted, ANSWER_PREFIX)
    assert counted["total"] == 1, dumps(counted)  # a greeting: one turn, one request


def test_claude_code_answers_through_the_gateway_with_an_auth_token(
    claude_code: ClaudeCode, gateway: Gateway, workdir: Path
) -> None:
    # ANTHROPIC_AUTH_TOKEN is sent as `Authorization: Bearer`, with no x-api-key.
    finished, counted = _claude(claude_code, gateway, workdir, ANTHROPIC_AUTH_TOKEN=KEY)
    _assert_answered(finished, counted, ANSWER_PREFIX)
    assert counted["total"] == 1, dumps(counted)


def test_claude_code_completes_a_tool_round_trip_through_the_gateway(
    claude_code: ClaudeCode, gateway: Gateway, workdir: Path
) -> None:
    # The simulated model thinks (a signed thinking block) and calls Read; Claude Code runs
    # it and sends the thinking, the tool call and its result back in a second request; the
    # model then answers from the results.
    finished, counted = _claude(
        claude_code, gateway, workdir, prompt="Read the notes file", ANTHROPIC_API_KEY=KEY
    )
    _assert_answered(finished, counted, TOOL_ANSWER_PREFIX)
    assert "tool result(s)" in finished.stdout, finished.describe()
    assert counted["total"] == 2, dumps(counted)


def test_a_wrong_key_ends_claude_code_at_once_without_retrying(
    claude_code: ClaudeCode, gateway: Gateway, workdir: Path
) -> None:
    # The gateway's 401 says `x-should-retry: false`; Claude Code would otherwise retry an
    # authentication error with backoff for minutes.
    finished, counted = _claude(
        claude_code,
        gateway,
        workdir,
        timeout=REFUSED_TIMEOUT_S,
        ANTHROPIC_API_KEY="pk-not-a-proxy-key",
    )
    assert finished.returncode != 0, finished.describe()
    assert "API key" in finished.stdout + finished.stderr, finished.describe()
    # One request, refused: no retry.
    assert (counted["total"], counted["by_status"]) == (1, {"401": 1}), dumps(counted)
    assert finished.seconds < REFUSED_TIMEOUT_S / 2, finished.describe()
