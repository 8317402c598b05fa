"""The conversation: the system prompt, the ``messages`` list and the rules across turns.

Each message's role and content (``block_checks`` checks the blocks), what a final
assistant message (a prefill) may look like, and the rules that span messages: where a
``role: "system"`` message may stand, and tool_use/tool_result pairing across turns
(consecutive same-role messages merged into one turn).

Mid-conversation system messages (``role: "system"`` inside ``messages``) need no beta
("available on Claude Opus 4.8 only. No beta header is required", and Claude Code sends
them to every generation-5 model); older models refuse the role unless the preview beta
``mid-conversation-system-2026-04-07`` is named. Where one may stand is documented: never
first, right after a user message (or an assistant message ending in server tool use),
and last or before an assistant message.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .betas import MID_CONVERSATION_SYSTEM
from .block_checks import check_content_block, check_text_block
from .field_checks import Walk, as_list, as_object, fail, is_set, join, one_of, only, required
from .generation_checks import EFFORTS
from .models import ModelCapabilities

# Beta-only fields of a role "system" message.
_SYSTEM_MESSAGE_BETA_KEYS: Final = frozenset({"clear_at", "output_config"})

MAX_MESSAGES: Final = 100_000
_EMPTY_CONTENT: Final = (
    "all messages must have non-empty content except for the optional final assistant message"
)
_TRAILING_WHITESPACE: Final = "final assistant content cannot end with trailing whitespace"


def check_system(value: object, walk: Walk) -> None:
    if isinstance(value, str):
        return
    for i, block in enumerate(as_list(value, "system")):
        path = f"system.{i}"
        block = as_object(block, path)
        if block.get("type") != "text":
            fail(join(path, "type"), "Input should be 'text'")
        check_text_block(block, path, walk)


def check_messages(value: object, walk: Walk, caps: ModelCapabilities) -> None:
    messages = as_list(value, "messages")
    if not messages:
        fail("messages", "at least one message is required")
    if len(messages) > MAX_MESSAGES:
        fail("messages", f"at most {MAX_MESSAGES} messages are allowed")
    last = len(messages) - 1
    for i, message in enumerate(messages):
        path = f"messages.{i}"
        message = as_object(message, path)
        role = one_of(
            required(message, "role", path), join(path, "role"), ("user", "assistant", "system")
        )
        if role == "system":
            _system_message(message, path, walk, caps)
            continue
        only(message, frozenset({"role", "content"}), path)
        prefill = i == last and role == "assistant"
        content = _content(message, path, role, walk, may_be_empty=prefill)
        if prefill:
            _no_trailing_whitespace(content, join(path, "content"))
    _system_placement(messages)
    _turns(messages)


def _system_message(
    message: Mapping[str, Any], path: str, walk: Walk, caps: ModelCapabilities
) -> None:
    """A ``role: "system"`` message (a mid-conversation system message).

    Models before Opus 4.8 refuse the role itself, unless the preview beta is named; a
    per-turn ``output_config`` (beta) with fields in it makes ``content`` optional.
    """
    if not (caps.system_messages or MID_CONVERSATION_SYSTEM in walk.betas):
        fail(join(path, "role"), "Input should be 'user' or 'assistant'")
    extra = _SYSTEM_MESSAGE_BETA_KEYS if walk.any_beta else frozenset()
    only(message, frozenset({"role", "content"}) | extra, path)
    if is_set(message, "clear_at"):
        one_of(message["clear_at"], join(path, "clear_at"), ("next_user_message", "never"))
    per_turn = False
    if is_set(message, "output_config"):
        opath = join(path, "output_config")
        config = as_object(message["output_config"], opath)
        only(config, frozenset({"effort"}), opath)
        if is_set(config, "effort"):
            one_of(config["effort"], join(opath, "effort"), EFFORTS)
        per_turn = bool(config)
    if per_turn and message.get("content") is None:
        return
    _content(message, path, "system", walk, may_be_empty=per_turn)


def _content(
    message: Mapping[str, Any], path: str, role: str, walk: Walk, *, may_be_empty: bool
) -> str | list[Any]:
    """A message's ``content``, a string or a list of blocks (each checked for ``role``);
    empty or blank only where ``may_be_empty`` (a prefill, a per-turn system message)."""
    content = required(message, "content", path)
    cpath = join(path, "content")
    if isinstance(content, str):
        if not content.strip() and not may_be_empty:
            fail(cpath, _EMPTY_CONTENT)
        return content
    blocks = as_list(content, cpath)
    if not blocks and not may_be_empty:
        fail(cpath, _EMPTY_CONTENT)
    for j, block in enumerate(blocks):
        check_content_block(block, join(cpath, j), role, walk)
    return blocks


def _no_trailing_whitespace(content: str | list[Any], cpath: str) -> None:
    """A prefill (the final assistant message) may not end in whitespace."""
    if isinstance(content, str):
        if content != content.rstrip():
            fail(cpath, _TRAILING_WHITESPACE)
    elif content:
        tail = content[-1]
        if tail.get("type") == "text" and tail["text"] != tail["text"].rstrip():
            fail(join(cpath, len(content) - 1), _TRAILING_WHITESPACE)


def _system_placement(messages: list[dict[str, Any]]) -> None:
    """Where system messages may stand: never first; right after a user message (or an
    assistant message ending in server tool use); last, or before an assistant message.
    Consecutive system messages are taken as one."""
    for i, message in enumerate(messages):
        if message["role"] != "system":
            continue
        path = f"messages.{i}"
        if i == 0:
            fail(
                path,
                "the first message may not be a system message; "
                "put the system prompt in the top-level `system` field",
            )
        before = messages[i - 1]
        if before["role"] == "assistant" and not _ends_in_server_tool_use(before):
            fail(
                path,
                "a system message must immediately follow a user message "
                "or an assistant message that ends in server tool use",
            )
        if i + 1 < len(messages) and messages[i + 1]["role"] == "user":
            fail(
                path,
                "a system message must be the last message or be followed by an assistant message",
            )


def _ends_in_server_tool_use(message: Mapping[str, Any]) -> bool:
    content = message["content"]
    return (
        isinstance(content, list)
        and bool(content)
        and content[-1].get("type") in ("server_tool_use", "mcp_tool_use")
    )


def _turns(messages: list[dict[str, Any]]) -> None:
    """Cross-message rules, applied to turns (consecutive same-role messages merged).

    * every ``tool_use`` id is unique;
    * an assistant turn's ``tool_use`` ids are each answered by a ``tool_result`` in the
      next (user) turn, when there is one;
    * a ``tool_result`` answers a ``tool_use`` of the immediately preceding assistant turn;
    * in a user turn, ``tool_result`` blocks come before any other content.
    """
    seen_ids: set[str] = set()
    pending: dict[str, int] = {}  # tool_use ids of the previous assistant turn -> message index
    answered: set[str] = set()
    role = ""  # role of the current turn
    other_content = False  # current user turn already holds a non-tool_result block
    for i, message in enumerate(messages):
        if message["role"] == "system":
            continue
        if message["role"] != role:
            if role == "user" and pending:
                _unanswered(pending, answered)
            if message["role"] == "assistant":
                pending = {}
            answered = set()
            other_content = False
            role = message["role"]
        content = message["content"]
        if isinstance(content, str):
            other_content = True
            continue
        for j, block in enumerate(content):
            kind = block["type"]
            if role == "assistant" and kind == "tool_use":
                tool_id = block["id"]
                if tool_id in seen_ids:
                    fail(f"messages.{i}.content.{j}", "`tool_use` ids must be unique")
                seen_ids.add(tool_id)
                pending[tool_id] = i
            elif role == "user" and kind == "tool_result":
                tool_id = block["tool_use_id"]
                if tool_id not in pending:
                    fail(
                        f"messages.{i}.content.{j}",
                        f"unexpected `tool_use_id` found in `tool_result` blocks: {tool_id}. "
                        "Each `tool_result` block must have a corresponding `tool_use` block "
                        "in the previous message.",
                    )
                if other_content:
                    fail(
                        f"messages.{i}.content.{j}",
                        "`tool_result` blocks must come first in the user message, before "
                        "any other content",
                    )
                answered.add(tool_id)
            elif role == "user":
                other_content = True
    if role == "user" and pending:
        _unanswered(pending, answered)


def _unanswered(pending: Mapping[str, int], answered: set[str]) -> None:
    missing = [tool_id for tool_id in pending if tool_id not in answered]
    if missing:
        index = pending[missing[0]]
        fail(
            f"messages.{index}",
            f"`tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(missing)}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message.",
        )
