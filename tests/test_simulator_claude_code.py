"""Claude Code's own requests reach the simulator and are answered.

``CAPTURED`` holds requests Claude Code 2.1.328 sent with ``-p`` (and interactively) to a
capture server, the long system prompt, tool descriptions and reminders trimmed to their
first words, the device id zeroed, and ``host``/``content-length``/``connection``/
``accept-encoding`` left for the client to set. Each is sent over loopback with its own
headers and must be answered as Claude Code expects: a stream it can read, or
``{"input_tokens": N}``. Then what the real API refuses of the same requests is refused
with the messages Claude Code reacts to.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final

import httpx2
import pytest
import trio

from trio_batcher.simulator import SimulatorConfig, run_simulator

# fmt: off
CAPTURED: Final[list[dict[str, Any]]] = json.loads(r"""
[
  {
    "label": "first turn, claude-opus-5-5 (the default model)",
    "path": "/v1/messages",
    "query": "beta=true",
    "headers": [
      ["Accept", "application/json"],
      ["Content-Type", "application/json"],
      ["User-Agent", "claude-cli/2.1.328 (external, sdk-cli)"],
      ["X-Claude-Code-Session-Id", "62eb0e48-d6ac-47f1-aa90-c4c2c5636c1d"],
      ["X-Stainless-Arch", "x64"],
      ["X-Stainless-Lang", "js"],
      ["X-Stainless-OS", "Linux"],
      ["X-Stainless-Package-Version", "0.128.0"],
      ["X-Stainless-Retry-Count", "0"],
      ["X-Stainless-Runtime", "node"],
      ["X-Stainless-Runtime-Version", "v26.12.1"],
      ["X-Stainless-Timeout", "600"],
      [
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24"
      ],
      ["anthropic-dangerous-direct-browser-access", "true"],
      ["anthropic-version", "2023-06-01"],
      ["x-api-key", "pk-test-123"],
      ["x-app", "cli"]
    ],
    "body": {
      "model": "claude-opus-5-5",
      "messages": [
        {
          "role": "user",
          "content": [
            {
              "type": "text",
              "text": "<system-reminder>\nAttribution for git commits and pull reque…"
            },
            {"type": "text", "text": "Say hello"}
          ]
        },
        {
          "role": "system",
          "content": [
            {
              "type": "text",
              "text": "# Environment\nYou have been invoked in the following environ…",
              "cache_control": {"type": "ephemeral"}
            }
          ],
          "output_config": {"effort": "medium"}
        }
      ],
      "system": [
        {
          "type": "text",
          "text": "x-anthropic-billing-header: cc_version=2.1.328.b7f; cc_entrypoint=sdk-cli;"
        },
        {
          "type": "text",
          "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
          "cache_control": {"type": "ephemeral"}
        },
        {
          "type": "text",
          "text": "\nYou are an agent working with the user toward their goals, …",
          "cache_control": {"type": "ephemeral"}
        }
      ],
      "tools": [
        {
          "name": "Bash",
          "description": "Executes a bash command and returns its output.\n\n- `cd` carr…",
          "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
              "command": {"description": "The command to execute", "type": "string"},
              "timeout": {
                "description": "Optional timeout in milliseconds (max 600000 for a foreground command)",
                "type": "number"
              },
              "description": {
                "description": "Clear, concise description of what this command does in acti…",
                "type": "string"
              }
            },
            "required": ["command"],
            "additionalProperties": false
          }
        },
        {
          "name": "DeferredToolPlaceholder",
          "description": "Reserved placeholder that keeps deferred tool loading active; never call this tool.",
          "input_schema": {"type": "object", "properties": {}},
          "defer_loading": true
        }
      ],
      "metadata": {
        "user_id": "{\"device_id\":\"0000000000000000000000000000000000000000000000…"
      },
      "max_tokens": 128000,
      "thinking": {"type": "adaptive", "display": "omitted"},
      "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
      "output_config": {"effort": "medium"},
      "stream": true
    }
  },
  {
    "label": "tool round trip",
    "path": "/v1/messages",
    "query": "beta=true",
    "headers": [
      ["Accept", "application/json"],
      ["Content-Type", "application/json"],
      ["User-Agent", "claude-cli/2.1.328 (external, sdk-cli)"],
      ["X-Claude-Code-Session-Id", "b3330f33-65d3-41c9-b03e-934b912bf047"],
      ["X-Stainless-Arch", "x64"],
      ["X-Stainless-Lang", "js"],
      ["X-Stainless-OS", "Linux"],
      ["X-Stainless-Package-Version", "0.128.0"],
      ["X-Stainless-Retry-Count", "0"],
      ["X-Stainless-Runtime", "node"],
      ["X-Stainless-Runtime-Version", "v26.12.1"],
      ["X-Stainless-Timeout", "600"],
      [
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24"
      ],
      ["anthropic-dangerous-direct-browser-access", "true"],
      ["anthropic-version", "2023-06-01"],
      ["x-api-key", "pk-test-123"],
      ["x-app", "cli"]
    ],
    "body": {
      "model": "claude-opus-5-5",
      "messages": [
        {
          "role": "user",
          "content": [
            {
              "type": "text",
              "text": "<system-reminder>\nAttribution for git commits and pull reque…"
            },
            {"type": "text", "text": "Run echo"}
          ]
        },
        {
          "role": "system",
          "content": "# Environment\nYou have been invoked in the following environ…",
          "output_config": {"effort": "medium"}
        },
        {
          "role": "assistant",
          "content": [
            {"type": "thinking", "thinking": "I will run echo.", "signature": "c2lnbmF0dXJl"},
            {
              "type": "tool_use",
              "id": "toolu_cap_01",
              "name": "Bash",
              "input": {"command": "echo hi-from-tool", "description": "Echo"}
            }
          ]
        },
        {
          "role": "user",
          "content": [
            {
              "tool_use_id": "toolu_cap_01",
              "type": "tool_result",
              "content": "hi-from-tool",
              "is_error": false,
              "cache_control": {"type": "ephemeral"}
            }
          ]
        }
      ],
      "system": [
        {
          "type": "text",
          "text": "x-anthropic-billing-header: cc_version=2.1.328.c5e; cc_entrypoint=sdk-cli;"
        },
        {
          "type": "text",
          "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
          "cache_control": {"type": "ephemeral"}
        },
        {
          "type": "text",
          "text": "\nYou are an agent working with the user toward their goals, …",
          "cache_control": {"type": "ephemeral"}
        }
      ],
      "tools": [
        {
          "name": "Bash",
          "description": "Executes a bash command and returns its output.\n\n- `cd` carr…",
          "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
              "command": {"description": "The command to execute", "type": "string"},
              "timeout": {
                "description": "Optional timeout in milliseconds (max 600000 for a foreground command)",
                "type": "number"
              },
              "description": {
                "description": "Clear, concise description of what this command does in acti…",
                "type": "string"
              }
            },
            "required": ["command"],
            "additionalProperties": false
          }
        },
        {
          "name": "DeferredToolPlaceholder",
          "description": "Reserved placeholder that keeps deferred tool loading active; never call this tool.",
          "input_schema": {"type": "object", "properties": {}},
          "defer_loading": true
        }
      ],
      "metadata": {
        "user_id": "{\"device_id\":\"0000000000000000000000000000000000000000000000…"
      },
      "max_tokens": 128000,
      "thinking": {"type": "adaptive", "display": "omitted"},
      "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
      "output_config": {"effort": "medium"},
      "stream": true
    }
  },
  {
    "label": "interactive auto mode: safeguards, thinking.display updates",
    "path": "/v1/messages",
    "query": "beta=true",
    "headers": [
      ["Accept", "application/json"],
      ["Content-Type", "application/json"],
      ["User-Agent", "claude-cli/2.1.328 (external, cli)"],
      ["X-Claude-Code-Session-Id", "ebe035d5-0c4a-4c69-b819-89faee58695b"],
      ["X-Stainless-Arch", "x64"],
      ["X-Stainless-Lang", "js"],
      ["X-Stainless-OS", "Linux"],
      ["X-Stainless-Package-Version", "0.128.0"],
      ["X-Stainless-Retry-Count", "0"],
      ["X-Stainless-Runtime", "node"],
      ["X-Stainless-Runtime-Version", "v26.12.1"],
      ["X-Stainless-Timeout", "600"],
      [
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24,dangerous-tool-use-2026-09-03,thinking-display-updates-2026-08-18,afk-mode-2026-01-31"
      ],
      ["anthropic-dangerous-direct-browser-access", "true"],
      ["anthropic-version", "2023-06-01"],
      ["x-api-key", "pk-test-123"],
      ["x-app", "cli"]
    ],
    "body": {
      "model": "claude-opus-5-5",
      "messages": [
        {
          "role": "user",
          "content": [
            {
              "type": "text",
              "text": "<system-reminder>\nAttribution for git commits and pull reque…"
            },
            {"type": "text", "text": "Say hello"}
          ]
        },
        {
          "role": "system",
          "content": [
            {
              "type": "text",
              "text": "# Environment\nYou have been invoked in the following environ…",
              "cache_control": {"type": "ephemeral"}
            }
          ],
          "output_config": {"effort": "medium"}
        }
      ],
      "system": [
        {
          "type": "text",
          "text": "x-anthropic-billing-header: cc_version=2.1.328.b7f; cc_entrypoint=cli;"
        },
        {
          "type": "text",
          "text": "You are Claude Code, Anthropic's official CLI for Claude.",
          "cache_control": {"type": "ephemeral"}
        },
        {
          "type": "text",
          "text": "\nYou are an agent working with the user toward their goals, …",
          "cache_control": {"type": "ephemeral"}
        }
      ],
      "tools": [
        {
          "name": "Bash",
          "description": "Executes a bash command and returns its output.\n\n- `cd` carr…",
          "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
              "command": {"description": "The command to execute", "type": "string"},
              "timeout": {
                "description": "Optional timeout in milliseconds (max 600000 for a foreground command)",
                "type": "number"
              },
              "description": {
                "description": "Clear, concise description of what this command does in acti…",
                "type": "string"
              }
            },
            "required": ["command"],
            "additionalProperties": false
          }
        },
        {
          "name": "DeferredToolPlaceholder",
          "description": "Reserved placeholder that keeps deferred tool loading active; never call this tool.",
          "input_schema": {"type": "object", "properties": {}},
          "defer_loading": true
        }
      ],
      "metadata": {
        "user_id": "{\"device_id\":\"0000000000000000000000000000000000000000000000…"
      },
      "max_tokens": 128000,
      "thinking": {"type": "adaptive", "display": "updates"},
      "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
      "safeguards": [
        {
          "type": "dangerous_tool_use",
          "classifier_context": {
            "v": 1,
            "permission_mode": "auto",
            "platform": "linux",
            "live_cwd": "/tmp/cc/work",
            "home_dir": "/tmp/cc/home_i",
            "rule_roots": {
              "userSettings": "/tmp/cc/home_i/.claude",
              "projectSettings": "/tmp/cc/work",
              "localSettings": "/tmp/cc/work",
              "flagSettings": "/tmp/cc/work",
              "policySettings": "/tmp/cc/work",
              "cliArg": "/tmp/cc/work",
              "command": "/tmp/cc/work",
              "session": "/tmp/cc/work",
              "toolsNarrowing": "/tmp/cc/work",
              "mcpServerPolicy": "/tmp/cc/work",
              "hostCredential": "/tmp/cc/work"
            }
          }
        }
      ],
      "output_config": {"effort": "medium"},
      "stream": true
    }
  },
  {
    "label": "--bare: a system message with output_config and no content",
    "path": "/v1/messages",
    "query": "beta=true",
    "headers": [
      ["Accept", "application/json"],
      ["Content-Type", "application/json"],
      ["User-Agent", "claude-cli/2.1.328 (external, sdk-cli)"],
      ["X-Claude-Code-Session-Id", "487d015d-01af-4850-a727-a870fae57c3a"],
      ["X-Stainless-Arch", "x64"],
      ["X-Stainless-Lang", "js"],
      ["X-Stainless-OS", "Linux"],
      ["X-Stainless-Package-Version", "0.128.0"],
      ["X-Stainless-Retry-Count", "0"],
      ["X-Stainless-Runtime", "node"],
      ["X-Stainless-Runtime-Version", "v26.12.1"],
      ["X-Stainless-Timeout", "600"],
      [
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,thinking-token-count-2026-05-13,effort-2025-11-24"
      ],
      ["anthropic-dangerous-direct-browser-access", "true"],
      ["anthropic-version", "2023-06-01"],
      ["x-api-key", "pk-test-123"],
      ["x-app", "cli"]
    ],
    "body": {
      "model": "claude-opus-5-5",
      "messages": [
        {
          "role": "user",
          "content": [
            {"type": "text", "text": "Say hello", "cache_control": {"type": "ephemeral"}}
          ]
        },
        {"role": "system", "content": [], "output_config": {"effort": "medium"}}
      ],
      "system": [
        {
          "type": "text",
          "text": "x-anthropic-billing-header: cc_version=2.1.328.b7f; cc_entrypoint=sdk-cli;"
        },
        {
          "type": "text",
          "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
          "cache_control": {"type": "ephemeral"}
        },
        {
          "type": "text",
          "text": "CWD: /tmp/cc/work\nDate: 2026-12-01",
          "cache_control": {"type": "ephemeral"}
        }
      ],
      "tools": [
        {
          "name": "Bash",
          "description": "execute shell commands",
          "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
              "command": {"description": "The command to execute", "type": "string"},
              "timeout": {
                "description": "Optional timeout in milliseconds (max 600000 for a foreground command)",
                "type": "number"
              },
              "description": {
                "description": "Clear, concise description of what this command does in acti…",
                "type": "string"
              }
            },
            "required": ["command"],
            "additionalProperties": false
          }
        }
      ],
      "metadata": {
        "user_id": "{\"device_id\":\"0000000000000000000000000000000000000000000000…"
      },
      "max_tokens": 128000,
      "thinking": {"type": "adaptive", "display": "omitted"},
      "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
      "output_config": {"effort": "medium"},
      "stream": true
    }
  },
  {
    "label": "--model claude-sonnet-4-5: enabled thinking, no system message",
    "path": "/v1/messages",
    "query": "beta=true",
    "headers": [
      ["Accept", "application/json"],
      ["Content-Type", "application/json"],
      ["User-Agent", "claude-cli/2.1.328 (external, sdk-cli)"],
      ["X-Claude-Code-Session-Id", "1f0203f4-1363-4338-b082-283d6606a511"],
      ["X-Stainless-Arch", "x64"],
      ["X-Stainless-Lang", "js"],
      ["X-Stainless-OS", "Linux"],
      ["X-Stainless-Package-Version", "0.128.0"],
      ["X-Stainless-Retry-Count", "0"],
      ["X-Stainless-Runtime", "node"],
      ["X-Stainless-Runtime-Version", "v26.12.1"],
      ["X-Stainless-Timeout", "600"],
      [
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20"
      ],
      ["anthropic-dangerous-direct-browser-access", "true"],
      ["anthropic-version", "2023-06-01"],
      ["x-api-key", "pk-test-123"],
      ["x-app", "cli"]
    ],
    "body": {
      "model": "claude-sonnet-4-5",
      "messages": [
        {
          "role": "user",
          "content": [
            {
              "type": "text",
              "text": "<system-reminder>\n# Environment\nYou have been invoked in the…"
            },
            {
              "type": "text",
              "text": "<system-reminder>\nYou are powered by the model named Sonnet …"
            },
            {
              "type": "text",
              "text": "<system-reminder>\nThe following deferred tools are now avail…"
            },
            {
              "type": "text",
              "text": "<system-reminder>\nAvailable agent types for the Agent tool:\n…"
            },
            {
              "type": "text",
              "text": "<system-reminder>\nThe following skills are available for use…"
            },
            {
              "type": "text",
              "text": "<system-reminder>\n<total_tokens>15000000 tokens left</total_tokens>\n</system-reminder>"
            },
            {
              "type": "text",
              "text": "<system-reminder>\nToday's date is 2026-12-01.\n</system-reminder>"
            },
            {
              "type": "text",
              "text": "<system-reminder>\nAttribution for git commits and pull reque…"
            },
            {"type": "text", "text": "Say hello", "cache_control": {"type": "ephemeral"}}
          ]
        }
      ],
      "system": [
        {
          "type": "text",
          "text": "x-anthropic-billing-header: cc_version=2.1.328.b7f; cc_entrypoint=sdk-cli;"
        },
        {
          "type": "text",
          "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
          "cache_control": {"type": "ephemeral"}
        },
        {
          "type": "text",
          "text": "\nYou are an agent working with the user toward their goals, …",
          "cache_control": {"type": "ephemeral"}
        }
      ],
      "tools": [
        {
          "name": "Bash",
          "description": "Executes a given bash command and returns its output.\n\n`cd` …",
          "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
              "command": {"description": "The command to execute", "type": "string"},
              "timeout": {
                "description": "Optional timeout in milliseconds (max 600000 for a foreground command)",
                "type": "number"
              },
              "description": {
                "description": "Clear, concise description of what this command does in acti…",
                "type": "string"
              }
            },
            "required": ["command"],
            "additionalProperties": false
          }
        },
        {
          "name": "DeferredToolPlaceholder",
          "description": "Reserved placeholder that keeps deferred tool loading active; never call this tool.",
          "input_schema": {"type": "object", "properties": {}},
          "defer_loading": true
        }
      ],
      "metadata": {
        "user_id": "{\"device_id\":\"0000000000000000000000000000000000000000000000…"
      },
      "max_tokens": 32000,
      "thinking": {"budget_tokens": 31999, "type": "enabled", "display": "omitted"},
      "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
      "stream": true
    }
  },
  {
    "label": "interactive /context: count_tokens",
    "path": "/v1/messages/count_tokens",
    "query": "beta=true",
    "headers": [
      ["Accept", "application/json"],
      ["Content-Type", "application/json"],
      ["User-Agent", "claude-cli/2.1.328 (external, cli)"],
      ["X-Claude-Code-Session-Id", "8825be6c-5902-413e-9d54-fb67703e9196"],
      ["X-Stainless-Arch", "x64"],
      ["X-Stainless-Lang", "js"],
      ["X-Stainless-OS", "Linux"],
      ["X-Stainless-Package-Version", "0.128.0"],
      ["X-Stainless-Retry-Count", "0"],
      ["X-Stainless-Runtime", "node"],
      ["X-Stainless-Runtime-Version", "v26.12.1"],
      [
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,token-counting-2024-11-01"
      ],
      ["anthropic-dangerous-direct-browser-access", "true"],
      ["anthropic-version", "2023-06-01"],
      ["x-api-key", "pk-test-123"],
      ["x-app", "cli"]
    ],
    "body": {
      "model": "claude-opus-5-5",
      "messages": [
        {
          "role": "user",
          "content": "\nYou are an agent working with the user toward their goals, …"
        }
      ],
      "tools": []
    }
  }
]
""")
# fmt: on


@asynccontextmanager
async def simulator() -> AsyncIterator[httpx2.AsyncClient]:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(partial(run_simulator, SimulatorConfig(), shutdown=stop))
        try:
            async with httpx2.AsyncClient(base_url=f"http://{host}:{port}") as http:
                yield http
        finally:
            stop.set()


def captured(label: str) -> dict[str, Any]:
    (found,) = (c for c in CAPTURED if c["label"].startswith(label))
    return found


async def send(
    http: httpx2.AsyncClient,
    request: dict[str, Any],
    body: dict[str, Any] | None = None,
    drop: frozenset[str] = frozenset(),
) -> httpx2.Response:
    headers = [(k, v) for k, v in request["headers"] if k.lower() not in drop]
    return await http.post(
        f"{request['path']}?{request['query']}",
        content=json.dumps(request["body"] if body is None else body).encode(),
        headers=headers,
    )


def events(stream: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event, data)`` pairs of an SSE body; every event is named, as Claude Code needs."""
    out = []
    for chunk in stream.strip().split("\n\n"):
        name, data = chunk.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


@pytest.mark.parametrize("request_", CAPTURED, ids=[c["label"] for c in CAPTURED])
async def test_a_captured_claude_code_request_is_answered(request_: dict[str, Any]) -> None:
    async with simulator() as http:
        response = await send(http, request_)
    assert response.status_code == 200, response.text
    if request_["path"].endswith("/count_tokens"):
        assert set(response.json()) == {"input_tokens"} and response.json()["input_tokens"] > 0
        return
    assert response.headers["content-type"].startswith("text/event-stream")
    stream = events(response.text)
    assert stream[0][0] == "message_start" and stream[-1][0] == "message_stop"
    assert stream[0][1]["message"]["model"] == request_["body"]["model"]
    (stop,) = [data for name, data in stream if name == "message_delta"]
    assert stop["delta"]["stop_reason"] in ("end_turn", "tool_use")


async def test_a_tool_round_trip_echoes_thinking_and_gets_a_text_answer() -> None:
    """The follow-up that carries the thinking signature and the tool result back."""
    async with simulator() as http:
        response = await send(http, captured("tool round trip"))
    assert response.status_code == 200
    deltas = [
        data["delta"]["type"]
        for name, data in events(response.text)
        if name == "content_block_delta"
    ]
    assert "text_delta" in deltas and "input_json_delta" not in deltas


async def test_what_the_real_api_refuses_of_them_is_refused() -> None:
    """Without the beta header, context_management is an extra input; a model from before
    mid-conversation system messages refuses the role with the message after which Claude
    Code folds the system turn into the user's; ``display: updates`` needs its beta."""
    first = captured("first turn")
    interactive = captured("interactive auto mode")
    async with simulator() as http:
        no_betas = await send(http, first, drop=frozenset({"anthropic-beta"}))
        old_model = await send(http, first, body={**first["body"], "model": "claude-opus-4-7"})
        no_display_beta = await send(
            http,
            {
                **interactive,
                "headers": [
                    (k, v.replace("thinking-display-updates-2026-08-18", "x-2026-01-01"))
                    for k, v in interactive["headers"]
                ],
            },
        )
    assert [r.status_code for r in (no_betas, old_model, no_display_beta)] == [400] * 3
    messages = [r.json()["error"]["message"] for r in (no_betas, old_model, no_display_beta)]
    assert messages[0] == "context_management: Extra inputs are not permitted"
    assert messages[1] == "messages.1.role: Input should be 'user' or 'assistant'"
    assert messages[2].startswith("thinking.display: Input should be one of")
