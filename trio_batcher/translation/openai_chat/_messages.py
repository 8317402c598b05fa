"""OpenAI ``messages`` → Anthropic ``system`` + strictly alternating ``messages``.

Theory of operation: one pass over the messages, building *turns*. A turn is a run of
same-role messages after system/developer messages are lifted out (they all go to the
top-level ``system``, wherever they sit), so two user messages separated by a system
message still form one user turn. Roles map as:

- ``user`` → blocks of a user turn;
- ``tool`` (and legacy ``function``) → ``tool_result`` blocks of a user turn, which are placed
  before the turn's other blocks, as Anthropic requires;
- ``assistant`` → a leading ``thinking`` block (from ``thinking_blocks``), text, then
  ``tool_use`` blocks.

Tool pairing is checked the way both APIs enforce it: a tool result must answer a call of the
assistant turn *immediately before* its turn, each call at most once, and every call of an
assistant turn must be answered in the next turn. Violations are a 400 naming the message,
so the client learns about it here rather than from an upstream error about re-numbered
turns it never sent.

Dropped, by rule: empty/whitespace text; an assistant message with neither content nor tool
calls; the trailing whitespace of a final assistant prefill (Anthropic rejects it).
``reasoning_content`` without ``thinking_blocks`` is display text with no signature, which
Anthropic cannot take back, so it is not forwarded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ...errors import ProxyError, invalid_request
from ...json_text import MAX_JSON_DEPTH, deeper_than, lone_surrogate, strict_loads
from ._content import (
    Block,
    assistant_blocks,
    is_blank,
    system_blocks,
    tool_result_content,
    user_blocks,
)

ROLES: Final = ("system", "developer", "user", "assistant", "tool", "function")
_NAMED_ROLES: Final = ("tool", "function")
_ID_UNSAFE: Final = re.compile(r"[^a-zA-Z0-9_-]")


def tool_use_id(raw: str) -> str:
    """An OpenAI tool call id made acceptable to Anthropic (``^[a-zA-Z0-9_-]+$``).

    OpenAI ids (``call_…``) pass unchanged; other clients' ids (``functions.get:0``) have the
    offending characters replaced, the same way on the call and on its result, plus a short
    digest of the original, so that two distinct ids (``call:1`` and ``call_1``) stay distinct.
    """
    safe = _ID_UNSAFE.sub("_", raw)
    if safe == raw:
        return raw
    return f"{safe}_{hashlib.blake2s(raw.encode(), digest_size=4).hexdigest()}"


@dataclass
class _Turn:
    role: Literal["user", "assistant"]
    blocks: list[Block] = field(default_factory=list)
    results: list[Block] = field(default_factory=list)  # tool_result blocks (user turns)
    # assistant turns: tool_use id → param of the call, for "never answered" errors
    calls: dict[str, str] = field(default_factory=dict)
    legacy: dict[str, list[str]] = field(default_factory=dict)  # function name → ids
    answered: set[str] = field(default_factory=set)
    empty_param: str | None = None  # first user message of the turn that had no content


@dataclass
class Conversation:
    system: list[Block]
    messages: list[dict[str, Any]]
    ignored: list[str]


def convert_messages(messages: object) -> Conversation:
    """Validate and convert the ``messages`` array.

    Raises:
      ProxyError: 400 ``invalid_request_error`` whose ``param`` names the offending field.
    """
    if not isinstance(messages, list):
        raise invalid_request("messages must be an array.", param="messages")
    if not messages:
        raise invalid_request("messages must contain at least one message.", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise invalid_request("A message must be an object.", param=f"messages[{i}]")
        if message.get("role") not in ROLES:
            raise invalid_request(
                f"Unknown role {message.get('role')!r}; expected one of {', '.join(ROLES)}.",
                param=f"messages[{i}].role",
            )
    return _Builder(messages).build()


class _Builder:
    def __init__(self, messages: list[Mapping[str, Any]]) -> None:
        self.source = messages
        self.system: list[Block] = []
        self.turns: list[_Turn] = []
        self.ignored: list[str] = []
        self.legacy_ids = 0
        self.tool_ids: set[str] = set()  # Anthropic wants tool_use ids unique per request

    def build(self) -> Conversation:
        for i, message in enumerate(self.source):
            role = message["role"]
            param = f"messages[{i}]"
            # A tool or function message's name adds nothing to its call id; others' do.
            if (
                role not in _NAMED_ROLES
                and message.get("name")
                and "messages[].name" not in self.ignored
            ):
                self.ignored.append("messages[].name")
            if role in ("system", "developer"):
                self.system.extend(
                    system_blocks(_required_content(message, param), f"{param}.content")
                )
            elif role == "user":
                self._user(message, param)
            elif role == "assistant":
                self._assistant(message, param)
            elif role == "tool":
                self._tool(message, param)
            else:
                self._function(message, param)
        self._close_turn()
        if self.turns and self.turns[-1].role == "assistant":
            _check_answered(self.turns[-1], set())
        self._strip_final_prefill()
        if not self.turns:
            raise invalid_request(
                "messages must contain at least one user or assistant message with content.",
                param="messages",
            )
        return Conversation(
            system=self.system,
            messages=[{"role": t.role, "content": t.results + t.blocks} for t in self.turns],
            ignored=self.ignored,
        )

    # -- turns -------------------------------------------------------------------------

    def _turn(self, role: Literal["user", "assistant"]) -> _Turn:
        if self.turns and self.turns[-1].role == role:
            return self.turns[-1]
        self._close_turn()
        self.turns.append(_Turn(role))
        return self.turns[-1]

    def _previous_assistant(self) -> _Turn | None:
        """The assistant turn right before the current user turn, if there is one."""
        if len(self.turns) >= 2 and self.turns[-1].role == "user":
            return self.turns[-2]
        return None

    def _close_turn(self) -> None:
        """Checks that need a whole user turn: content present, every call answered."""
        if not self.turns or self.turns[-1].role != "user":
            return
        turn = self.turns[-1]
        if not turn.blocks and not turn.results:
            raise invalid_request(
                "A user message must have non-empty content.", param=turn.empty_param
            )
        previous = self._previous_assistant()
        if previous is not None:
            _check_answered(previous, turn.answered)

    def _strip_final_prefill(self) -> None:
        if not self.turns or self.turns[-1].role != "assistant":
            return
        turn = self.turns[-1]
        if turn.blocks and turn.blocks[-1]["type"] == "text":
            text = turn.blocks[-1]["text"].rstrip()
            if text:
                turn.blocks[-1] = {**turn.blocks[-1], "text": text}
            else:
                turn.blocks.pop()
        if not turn.blocks:
            self.turns.pop()

    # -- roles -------------------------------------------------------------------------

    def _user(self, message: Mapping[str, Any], param: str) -> None:
        blocks = user_blocks(_required_content(message, param), f"{param}.content")
        turn = self._turn("user")
        if not blocks and turn.empty_param is None:
            turn.empty_param = f"{param}.content"
        turn.blocks.extend(blocks)

    def _assistant(self, message: Mapping[str, Any], param: str) -> None:
        if message.get("audio") is not None:
            raise invalid_request(
                "Assistant audio (a previous audio reply) is not supported.", param=f"{param}.audio"
            )
        thinking = _thinking_blocks(message.get("thinking_blocks"), f"{param}.thinking_blocks")
        text = assistant_blocks(message.get("content"), f"{param}.content")
        refusal = message.get("refusal")
        if not text and isinstance(refusal, str) and not is_blank(refusal):
            text = [{"type": "text", "text": refusal}]
        calls: list[tuple[Block, str]] = []
        for k, call in enumerate(_list(message.get("tool_calls"), f"{param}.tool_calls")):
            calls.append(_tool_call(call, f"{param}.tool_calls[{k}]"))
        legacy = message.get("function_call")
        legacy_call: Block | None = None
        if legacy is not None:
            legacy_call = _legacy_call(legacy, f"{param}.function_call", self.legacy_ids)
            self.legacy_ids += 1
        if not text and not calls and legacy_call is None:
            return  # nothing Anthropic could take; a final empty prefill is no prefill
        turn = self._turn("assistant")
        turn.blocks.extend(thinking + text)
        for block, call_param in calls:
            if block["id"] in self.tool_ids:
                raise invalid_request(
                    f"Tool call ids must be unique in a conversation; {block['id']!r} repeats.",
                    param=f"{call_param}.id",
                )
            self.tool_ids.add(block["id"])
            turn.calls[block["id"]] = call_param
            turn.blocks.append(block)
        if legacy_call is not None:
            turn.calls[legacy_call["id"]] = f"{param}.function_call"
            turn.legacy.setdefault(legacy_call["name"], []).append(legacy_call["id"])
            turn.blocks.append(legacy_call)

    def _tool(self, message: Mapping[str, Any], param: str) -> None:
        raw_id = message.get("tool_call_id")
        if not isinstance(raw_id, str) or not raw_id:
            raise invalid_request(
                "A tool message needs a tool_call_id.", param=f"{param}.tool_call_id"
            )
        content = tool_result_content(_required_content(message, param), f"{param}.content")
        turn = self._turn("user")
        self._answer(turn, tool_use_id(raw_id), content, f"{param}.tool_call_id", raw_id)

    def _function(self, message: Mapping[str, Any], param: str) -> None:
        name = message.get("name")
        if not isinstance(name, str) or not name:
            raise invalid_request("A function message needs a name.", param=f"{param}.name")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise invalid_request(
                "A function message's content must be a string.", param=f"{param}.content"
            )
        turn = self._turn("user")
        previous = self._previous_assistant()
        pending = [
            i for i in (previous.legacy.get(name, []) if previous else []) if i not in turn.answered
        ]
        if not pending:
            raise invalid_request(
                f"No function_call to {name!r} in the preceding assistant message to answer.",
                param=f"{param}.name",
            )
        self._answer(
            turn,
            pending[0],
            tool_result_content(content, f"{param}.content"),
            f"{param}.name",
            name,
        )

    def _answer(
        self, turn: _Turn, call_id: str, content: str | list[Block] | None, param: str, shown: str
    ) -> None:
        previous = self._previous_assistant()
        if previous is None or call_id not in previous.calls:
            earlier = any(call_id in t.calls for t in self.turns[:-2])
            raise invalid_request(
                f"Tool result {shown!r} does not answer a tool call of the assistant message "
                "right before it"
                + (" (tool results must directly follow the call)." if earlier else "."),
                param=param,
            )
        if call_id in turn.answered:
            raise invalid_request(f"Tool call {shown!r} is answered twice.", param=param)
        turn.answered.add(call_id)
        result: Block = {"type": "tool_result", "tool_use_id": call_id}
        if content is not None:
            result["content"] = content
        turn.results.append(result)


def _check_answered(assistant: _Turn, answered: set[str]) -> None:
    for call_id, param in assistant.calls.items():
        if call_id not in answered:
            raise invalid_request(
                "An assistant message with tool_calls must be followed by tool messages "
                f"answering each call; tool call {call_id!r} has no result.",
                param=param,
            )


def _required_content(message: Mapping[str, Any], param: str) -> object:
    if "content" not in message or message["content"] is None:
        raise invalid_request("This message needs content.", param=f"{param}.content")
    return message["content"]


def _list(value: object, param: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_request("Expected an array.", param=param)
    return value


def _arguments(raw: object, param: str) -> dict[str, Any]:
    if not isinstance(raw, str):
        raise invalid_request("function.arguments must be a JSON string.", param=param)
    if is_blank(raw):
        return {}
    # The same rules as the body it came in (json_text): it is serialised again upstream.
    try:
        value = strict_loads(raw)
    except ValueError:
        raise invalid_request("function.arguments is not valid JSON.", param=param) from None
    except RecursionError:
        raise _too_deep(param) from None
    if deeper_than(raw, MAX_JSON_DEPTH):
        raise _too_deep(param)
    if ("\\ud" in raw or "\\uD" in raw) and lone_surrogate(value) is not None:
        raise invalid_request(
            "function.arguments contains an unpaired UTF-16 surrogate escape, which is not "
            "valid Unicode text.",
            param=param,
        )
    if not isinstance(value, dict):
        raise invalid_request("function.arguments must encode a JSON object.", param=param)
    return value


def _too_deep(param: str) -> ProxyError:
    return invalid_request(
        f"function.arguments is nested too deeply (more than {MAX_JSON_DEPTH} levels).",
        param=param,
    )


def _tool_call(call: object, param: str) -> tuple[Block, str]:
    if not isinstance(call, Mapping):
        raise invalid_request("A tool call must be an object.", param=param)
    if call.get("type", "function") != "function":
        raise invalid_request(
            f"Unsupported tool call type {call.get('type')!r}; only function calls are supported.",
            param=f"{param}.type",
        )
    raw_id = call.get("id")
    if not isinstance(raw_id, str) or not raw_id:
        raise invalid_request("A tool call needs an id.", param=f"{param}.id")
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise invalid_request("A tool call needs a function object.", param=f"{param}.function")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise invalid_request("A tool call needs a function name.", param=f"{param}.function.name")
    block = {
        "type": "tool_use",
        "id": tool_use_id(raw_id),
        "name": name,
        "input": _arguments(function.get("arguments"), f"{param}.function.arguments"),
    }
    return block, param


def _legacy_call(call: object, param: str, n: int) -> Block:
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or not call["name"]:
        raise invalid_request("function_call needs a name and arguments.", param=param)
    return {
        "type": "tool_use",
        "id": f"call_legacy_{n}",
        "name": call["name"],
        "input": _arguments(call.get("arguments"), f"{param}.arguments"),
    }


def _thinking_blocks(value: object, param: str) -> list[Block]:
    """``thinking_blocks`` as sent back by a client (see response.py), passed on unchanged."""
    blocks: list[Block] = []
    for j, block in enumerate(_list(value, param)):
        where = f"{param}[{j}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if (
            kind == "thinking"
            and isinstance(block.get("thinking"), str)
            and isinstance(block.get("signature"), str)
        ):
            blocks.append(
                {"type": "thinking", "thinking": block["thinking"], "signature": block["signature"]}
            )
        elif kind == "redacted_thinking" and isinstance(block.get("data"), str):
            blocks.append({"type": "redacted_thinking", "data": block["data"]})
        else:
            raise invalid_request(
                'A thinking block must be {"type": "thinking", "thinking", "signature"} or '
                '{"type": "redacted_thinking", "data"}.',
                param=where,
            )
    return blocks
