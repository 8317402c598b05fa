"""What ``anthropic-beta`` unlocks in the simulator's validation, and mid-conversation system
messages -- as data, then once over loopback to prove the header reaches validation."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx2
import pytest
import trio

from trio_batcher.simulator import SimulatorConfig, SimulatorInvalidRequest, run_simulator
from trio_batcher.simulator.betas import BETA_FIELDS, beta_families, parse_betas
from trio_batcher.simulator.validation import (
    CONTEXT_EDIT_KEYS,
    COUNT_TOKENS_BETA_KEYS,
    COUNT_TOKENS_KEYS,
    MCP_SERVER_KEYS,
    MESSAGES_BETA_KEYS,
    MESSAGES_KEYS,
    validate_count_tokens_request,
    validate_messages_request,
)

OLD = "2023-06-01"
USER = {"role": "user", "content": "hi"}
SYSTEM = {"role": "system", "content": "Answer in French."}
CM = "context-management-2025-06-27"
# Claude Code 2.1.328's default list
CLAUDE_CODE = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,"
    "thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24"
)
CLEAR_THINKING = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
CLEAR_TOOL_USES = {
    "edits": [
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 30000},
            "keep": {"type": "tool_uses", "value": 3},
            "clear_at_least": {"type": "input_tokens", "value": 5000},
            "exclude_tools": ["web_search"],
            "clear_tool_inputs": True,
        }
    ]
}
MCP = [{"type": "url", "url": "https://mcp.example.com/sse", "name": "example"}]


def body(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "claude-opus-4-8", "max_tokens": 64, "messages": [USER]}
    base.update(changes)
    return base


def valid(request: dict[str, Any], *betas: str, count_tokens: bool = False) -> None:
    snapshot = copy.deepcopy(request)
    validate = validate_count_tokens_request if count_tokens else validate_messages_request
    validate(request, api_version=OLD, betas=parse_betas(betas))
    assert request == snapshot  # pure: never mutates


def refused(request: dict[str, Any], *betas: str, count_tokens: bool = False) -> str:
    validate = validate_count_tokens_request if count_tokens else validate_messages_request
    with pytest.raises(SimulatorInvalidRequest) as info:
        validate(request, api_version=OLD, betas=parse_betas(betas))
    assert info.value.status == 400 and info.value.type == "invalid_request_error"
    return str(info.value)


# --------------------------------------------------------------------------- the header


def test_beta_header_values_are_comma_lists_and_may_repeat() -> None:
    assert parse_betas(["a-2025-01-01, b-20250219", " ,c-2026-07-01", "a-2025-01-01"]) == {
        "a-2025-01-01",
        "b-20250219",
        "c-2026-07-01",
    }
    assert parse_betas([]) == parse_betas(["", " , "]) == frozenset()
    assert beta_families(parse_betas([CLAUDE_CODE])) == {
        "claude-code",
        "interleaved-thinking",
        "context-management",
        "per-turn-control",
        "mid-conversation-tool-changes",
        "thinking-token-count",
        "advanced-tool-use",
        "effort",
    }


# --------------------------------------------------------------------------- beta-only fields


def test_context_management_needs_its_beta_as_upstream() -> None:
    """Without the beta the API says exactly this (Claude Code users met it on gateways
    that dropped the header); with it, or with the compact beta, the field is accepted."""
    for request in (body(context_management=CLEAR_THINKING), body(context_management=None)):
        assert refused(request) == "context_management: Extra inputs are not permitted"
        # a beta that has nothing to do with it does not help
        assert refused(request, "effort-2025-11-24").startswith("context_management: Extra")
    valid(body(context_management=CLEAR_THINKING), CM)
    valid(body(context_management=CLEAR_TOOL_USES), "context-management-2099-01-01")
    compact = {
        "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 1}}]
    }
    valid(body(context_management=compact), "compact-2026-01-12")
    valid(body(context_management={}), CM)
    valid(body(context_management={"edits": []}), CM)
    valid(
        body(
            context_management={
                "edits": [
                    {
                        "type": "clear_thinking_20251015",
                        "keep": {"type": "thinking_turns", "value": 2},
                    },
                    {"type": "clear_tool_uses_20250919", "clear_tool_inputs": ["Bash"]},
                    {
                        "type": "compact_20260112",
                        "instructions": "x",
                        "pause_after_compaction": True,
                    },
                ]
            }
        ),
        CM,
    )


BAD_CONTEXT_MANAGEMENT: list[tuple[object, str]] = [
    ([], "context_management: Input should be an object"),
    ({"edit": []}, "context_management.edit: Extra inputs are not permitted"),
    ({"edits": {}}, "context_management.edits: Input should be a valid list"),
    ({"edits": ["x"]}, "context_management.edits.0: Input should be an object"),
    ({"edits": [{}]}, "context_management.edits.0.type: Field required"),
    (
        {"edits": [{"type": "clear_everything_20990101"}]},
        "context_management.edits.0.type: Input tag 'clear_everything_20990101'",
    ),
    (
        {"edits": [{"type": "clear_thinking_20251015", "trigger": {}}]},
        "context_management.edits.0.trigger: Extra inputs are not permitted",
    ),
    (
        {"edits": [{"type": "clear_thinking_20251015", "keep": "none"}]},
        "context_management.edits.0.keep: Input should be an object",
    ),
    (
        {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "tool_uses", "value": 1}}]},
        "context_management.edits.0.keep.type: Input should be one of 'thinking_turns', 'all'",
    ),
    (
        {"edits": [{"type": "clear_tool_uses_20250919", "keep": "all"}]},
        "context_management.edits.0.keep: Input should be an object",
    ),
    (
        {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens"}}]},
        "context_management.edits.0.trigger.value: Field required",
    ),
    (
        {
            "edits": [
                {
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "input_tokens", "value": "9"},
                }
            ]
        },
        "context_management.edits.0.trigger.value: Input should be a valid integer",
    ),
    (
        {"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": "Bash"}]},
        "context_management.edits.0.exclude_tools: Input should be a valid list",
    ),
    (
        {"edits": [{"type": "clear_tool_uses_20250919", "clear_tool_inputs": [1]}]},
        "context_management.edits.0.clear_tool_inputs.0: Input should be a valid string",
    ),
    (
        {"edits": [{"type": "compact_20260112", "pause_after_compaction": "yes"}]},
        "context_management.edits.0.pause_after_compaction: Input should be a valid boolean",
    ),
]


@pytest.mark.parametrize(("value", "prefix"), BAD_CONTEXT_MANAGEMENT)
def test_malformed_context_management_is_refused_naming_the_field(
    value: object, prefix: str
) -> None:
    assert refused(body(context_management=value), CM).startswith(prefix)


def test_compaction_cannot_be_combined_with_context_management() -> None:
    both = body(context_management=CLEAR_THINKING, compaction={"type": "summarize"})
    assert refused(both, CM).startswith("compaction: ")
    valid(body(compaction={"type": "summarize"}), "compact-2026-09-04")


def test_mcp_servers_need_the_mcp_client_beta() -> None:
    assert refused(body(mcp_servers=MCP)) == "mcp_servers: Extra inputs are not permitted"
    assert refused(body(mcp_servers=MCP), CM).startswith("mcp_servers: Extra")
    valid(body(mcp_servers=MCP), "mcp-client-2025-04-04")
    valid(body(mcp_servers=[{**MCP[0], "authorization_token": "t"}]), "mcp-client-2025-11-20")
    for server, prefix in (
        ({"type": "url", "name": "x"}, "mcp_servers.0.url: Field required"),
        ({**MCP[0], "type": "stdio"}, "mcp_servers.0.type: Input should be one of 'url'"),
        ({**MCP[0], "headers": {}}, "mcp_servers.0.headers: Extra inputs are not permitted"),
    ):
        assert refused(body(mcp_servers=[server]), "mcp-client-2025-04-04").startswith(prefix)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("fallbacks", "default"),
        ("fallback_credit_token", "tok"),
        ("thread", {"type": "create"}),
        ("billing_policy", {"type": "billing_policy", "bill_to": "self"}),
        ("compaction", {"type": "summarize"}),
        ("safeguards", [{"type": "dangerous_tool_use", "classifier_context": {"v": 1}}]),
    ],
)
def test_other_beta_fields_need_a_beta(field: str, value: object) -> None:
    """Which beta each needs is not documented: any beta unlocks them, none refuses them."""
    assert refused(body(**{field: value})) == f"{field}: Extra inputs are not permitted"
    valid(body(**{field: value}), "dangerous-tool-use-2026-09-03")


def test_count_tokens_takes_the_beta_fields_of_its_own_shape() -> None:
    counting = {"model": "claude-opus-5-5", "messages": [USER], "tools": []}
    valid(counting, count_tokens=True)
    valid({**counting, "context_management": CLEAR_THINKING}, CM, count_tokens=True)
    valid({**counting, "mcp_servers": MCP}, "mcp-client-2025-04-04", count_tokens=True)
    assert refused({**counting, "context_management": CLEAR_THINKING}, count_tokens=True) == (
        "context_management: Extra inputs are not permitted"
    )
    for field in ("max_tokens", "metadata", "stream", "fallbacks", "safeguards"):
        message = refused({**counting, field: 1}, CLAUDE_CODE, count_tokens=True)
        assert message == f"{field}: Extra inputs are not permitted"


def test_thinking_display_updates_needs_its_beta() -> None:
    request = body(thinking={"type": "adaptive", "display": "updates"})
    assert refused(request, CLAUDE_CODE).startswith("thinking.display: Input should be one of")
    valid(request, "thinking-display-updates-2026-08-18")
    valid(body(thinking={"type": "adaptive", "display": "omitted"}))


def test_beta_only_blocks_toolsets_and_config_need_a_beta() -> None:
    compaction = {"type": "compaction", "content": "summary"}
    request = body(messages=[{"role": "user", "content": [compaction]}])
    assert refused(request).startswith("messages.0.content.0.type: Input tag 'compaction'")
    valid(request, "compact-2026-01-12")

    toolset = {"type": "mcp_toolset", "mcp_server_name": "example"}
    request = body(mcp_servers=MCP, tools=[toolset])
    valid(request, "mcp-client-2025-11-20")
    assert refused(body(tools=[toolset])).startswith("tools.0.type: unknown tool type")

    budget = body(output_config={"effort": "high", "task_budget": {"type": "tokens", "total": 9}})
    assert refused(budget).startswith("output_config.task_budget: Extra inputs")
    valid(budget, "task-budgets-2026-03-13")


def test_a_type_that_is_not_a_string_is_a_bad_request_not_a_crash() -> None:
    odd = {"not": "hashable"}
    tool_result = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": odd}]}
    for request, prefix in (
        (body(messages=[{"role": "user", "content": [{"type": odd}]}]), "messages.0.content.0"),
        (
            body(
                messages=[
                    USER,
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                    },
                    {"role": "user", "content": [tool_result]},
                ]
            ),
            "messages.2.content.0.content.0",
        ),
        (body(tools=[{"type": odd, "name": "x"}]), "tools.0"),
        (body(context_management={"edits": [{"type": odd}]}), "context_management.edits.0"),
    ):
        assert refused(request, CLAUDE_CODE).startswith(f"{prefix}.type: ")


def test_beta_field_tables_mirror_the_installed_sdk() -> None:
    """The beta API's fields are the non-beta ones plus ours (drift detector)."""
    from anthropic.types.beta import (
        BetaClearThinking20251015EditParam,
        BetaClearToolUses20250919EditParam,
        BetaCompact20260112EditParam,
        BetaRequestMCPServerURLDefinitionParam,
        message_count_tokens_params,
        message_create_params,
    )

    sent_as_headers = {"betas", "user_profile_id", "workspace_id"}
    legacy_sampling = {"temperature", "top_p", "top_k"}
    create = set(message_create_params.MessageCreateParamsNonStreaming.__annotations__)
    not_in_sdk = {"safeguards"}  # Claude Code's
    assert (create - sent_as_headers) | legacy_sampling | not_in_sdk == (
        MESSAGES_KEYS | MESSAGES_BETA_KEYS
    )
    counting = set(message_count_tokens_params.MessageCountTokensParams.__annotations__)
    assert counting - sent_as_headers - {"output_format"} == (
        COUNT_TOKENS_KEYS | COUNT_TOKENS_BETA_KEYS
    )
    assert set(BETA_FIELDS) <= MESSAGES_BETA_KEYS & COUNT_TOKENS_BETA_KEYS
    edits = {
        "clear_tool_uses_20250919": BetaClearToolUses20250919EditParam,
        "clear_thinking_20251015": BetaClearThinking20251015EditParam,
        "compact_20260112": BetaCompact20260112EditParam,
    }
    assert {kind: set(typed.__annotations__) for kind, typed in edits.items()} == CONTEXT_EDIT_KEYS
    assert set(BetaRequestMCPServerURLDefinitionParam.__annotations__) == MCP_SERVER_KEYS


# --------------------------------------------------------------------------- system messages


@pytest.mark.parametrize(
    "model",
    [
        "claude-opus-4-8",
        "claude-opus-4-9",
        "claude-opus-5-5",
        "claude-sonnet-5-5",
        "claude-haiku-5",
        "claude-fable-5-2",  # ids the capability table cannot place: never refused
        "claude-next",
    ],
)
def test_system_messages_need_no_beta_on_models_that_take_them(model: str) -> None:
    valid(body(model=model, messages=[USER, SYSTEM]))
    valid(
        body(
            model=model,
            messages=[USER, {"role": "system", "content": [{"type": "text", "text": "x"}]}],
        )
    )


@pytest.mark.parametrize(
    "model", ["claude-opus-4-7", "claude-sonnet-4-6", "claude-sonnet-4-5", "claude-haiku-4-5"]
)
def test_older_models_refuse_the_system_role_unless_the_preview_beta_is_named(model: str) -> None:
    """The message Claude Code reacts to (it folds the turn into the user's and retries)."""
    request = body(model=model, max_tokens=64, messages=[USER, SYSTEM])
    assert refused(request, CLAUDE_CODE) == "messages.1.role: Input should be 'user' or 'assistant'"
    valid(request, "mid-conversation-system-2026-04-07")


def test_system_messages_stand_after_a_user_turn_and_before_an_assistant_turn() -> None:
    assistant = {"role": "assistant", "content": "Bonjour."}
    server_tool = {
        "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
        ],
    }
    for messages in (
        [USER, SYSTEM],
        [USER, SYSTEM, SYSTEM],
        [USER, SYSTEM, assistant, USER, SYSTEM],
        [USER, server_tool, SYSTEM],
    ):
        valid(body(messages=messages))
    for messages, prefix in (
        ([SYSTEM, USER], "messages.0: the first message may not be a system message"),
        ([USER, assistant, SYSTEM], "messages.2: a system message must immediately follow"),
        ([USER, SYSTEM, USER], "messages.1: a system message must be the last message"),
        ([USER, SYSTEM, SYSTEM, USER], "messages.2: a system message must be the last message"),
    ):
        assert refused(body(messages=messages)).startswith(prefix)


def test_system_message_content_and_per_turn_fields() -> None:
    def system(**message: Any) -> dict[str, Any]:
        return body(model="claude-opus-5-5", messages=[USER, {"role": "system", **message}])

    per_turn = {"effort": "medium"}
    # Claude Code: per-turn output_config (under per-turn-control), --bare's empty content
    valid(system(content=[{"type": "text", "text": "x"}], output_config=per_turn), CLAUDE_CODE)
    valid(system(content=[], output_config=per_turn), CLAUDE_CODE)
    valid(system(output_config=per_turn), CLAUDE_CODE)
    valid(
        system(content="x", clear_at="next_user_message"),
        "mid-conversation-system-clear-at-2026-08-21",
    )
    tool = {"name": "t", "input_schema": {"type": "object"}}
    valid(system(content=[{"type": "tool_addition", "tool": tool}]), CLAUDE_CODE)

    assert refused(system(content="x", output_config=per_turn)).startswith(
        "messages.1.output_config: Extra inputs are not permitted"
    )
    for message, prefix in (
        ({"content": []}, "messages.1.content: all messages must have non-empty content"),
        ({"content": " "}, "messages.1.content: all messages must have non-empty content"),
        ({"content": [], "output_config": {}}, "messages.1.content: all messages must"),
        ({}, "messages.1.content: Field required"),
        (
            {"content": "x", "output_config": {"format": {}}},
            "messages.1.output_config.format: Extra inputs",
        ),
        (
            {"content": "x", "output_config": {"effort": "extreme"}},
            "messages.1.output_config.effort: Input should be one of",
        ),
        ({"content": "x", "clear_at": "later"}, "messages.1.clear_at: Input should be one of"),
        (
            {"content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]},
            "messages.1.content.0.type: system messages may only contain text blocks",
        ),
        (
            {"content": [{"type": "search_result", "source": "s", "title": "t", "content": []}]},
            "messages.1.content.0.type: system messages may only contain text blocks",
        ),
    ):
        assert refused(system(**message), CLAUDE_CODE).startswith(prefix)
    assert refused(system(content=[{"type": "tool_addition", "tool": tool}])).startswith(
        "messages.1.content.0.type: Input tag 'tool_addition'"
    )


# --------------------------------------------------------------------------- over HTTP


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


async def test_the_beta_header_reaches_validation_on_both_endpoints() -> None:
    """Repeated headers and comma lists both count; the query string is ignored."""
    headers = [("x-api-key", "sk-test"), ("anthropic-version", OLD)]
    messages = body(context_management=CLEAR_THINKING)
    counting = {
        "model": "claude-opus-4-8",
        "messages": [USER],
        "context_management": CLEAR_THINKING,
    }
    async with simulator() as http:
        for path, payload in (("/v1/messages", messages), ("/v1/messages/count_tokens", counting)):
            bare = await http.post(path, json=payload, headers=headers)
            assert bare.status_code == 400
            assert bare.json()["error"]["message"] == (
                "context_management: Extra inputs are not permitted"
            )
            unlocked = await http.post(
                path,
                params={"beta": "true"},
                json=payload,
                headers=[
                    *headers,
                    ("anthropic-beta", "effort-2025-11-24"),
                    ("anthropic-beta", f"x,{CM}"),
                ],
            )
            assert unlocked.status_code == 200, unlocked.text
        tokens = unlocked.json()["input_tokens"]
        assert tokens > 0
        # the count before context editing, which the beta reports; the simulator edits nothing
        assert unlocked.json() == {
            "input_tokens": tokens,
            "context_management": {"original_input_tokens": tokens},
        }
        without = {k: v for k, v in counting.items() if k != "context_management"}
        plain = await http.post("/v1/messages/count_tokens", json=without, headers=headers)
        assert plain.json() == {"input_tokens": tokens}
