"""OpenAI ``messages`` → Anthropic ``system`` + strictly alternating ``messages``.

Theory of operation: one pass over the messages, building *turns* with the builder the
Responses path shares (``_common.turns``). A turn is a run of same-role messages after
system/developer messages are lifted out (they all go to the top-level ``system``, wherever
they sit), so two user messages separated by a system message still form one user turn.
Roles map as:

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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...errors import invalid_request
from .._common.content import Block, is_blank
from .._common.tool_calls import call_arguments, tool_use_id
from .._common.turns import Turns, Wording
from ._content import assistant_blocks, system_blocks, tool_result_content, user_blocks

ROLES: Final = ("system", "developer", "user", "assistant", "tool", "function")
_NAMED_ROLES: Final = ("tool", "function")
_WORDING: Final = Wording(
    unanswered="An assistant message with tool_calls must be followed by tool messages "
    "answering each call; tool call {call_id!r} has no result.",
    stray="Tool result {shown!r} does not answer a tool call of the assistant message "
    "right before it",
    stray_later=" (tool results must directly follow the call).",
    twice="Tool call {shown!r} is answered twice.",
    nothing="messages must contain at least one user or assistant message with content.",
    nothing_param="messages",
)


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
        self.turns = Turns(_WORDING)
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
                blocks = user_blocks(_required_content(message, param), f"{param}.content")
                self.turns.add_user(blocks, f"{param}.content")
            elif role == "assistant":
                self._assistant(message, param)
            elif role == "tool":
                self._tool(message, param)
            else:
                self._function(message, param)
        self.turns.finish()
        return Conversation(
            system=self.system, messages=self.turns.messages(), ignored=self.ignored
        )

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
        turn = self.turns.add_assistant(thinking + text, param)
        for block, call_param in calls:
            if block["id"] in self.tool_ids:
                raise invalid_request(
                    f"Tool call ids must be unique in a conversation; {block['id']!r} repeats.",
                    param=f"{call_param}.id",
                )
            self.tool_ids.add(block["id"])
            self.turns.add_call(turn, block, call_param)
        if legacy_call is not None:
            turn.by_name.setdefault(legacy_call["name"], []).append(legacy_call["id"])
            self.turns.add_call(turn, legacy_call, f"{param}.function_call")

    def _tool(self, message: Mapping[str, Any], param: str) -> None:
        raw_id = message.get("tool_call_id")
        if not isinstance(raw_id, str) or not raw_id:
            raise invalid_request(
                "A tool message needs a tool_call_id.", param=f"{param}.tool_call_id"
            )
        content = tool_result_content(_required_content(message, param), f"{param}.content")
        result = self.turns.answer(tool_use_id(raw_id), f"{param}.tool_call_id", raw_id)
        if content is not None:
            result["content"] = content

    def _function(self, message: Mapping[str, Any], param: str) -> None:
        name = message.get("name")
        if not isinstance(name, str) or not name:
            raise invalid_request("A function message needs a name.", param=f"{param}.name")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise invalid_request(
                "A function message's content must be a string.", param=f"{param}.content"
            )
        turn = self.turns.turn("user")
        previous = self.turns.previous_assistant()
        pending = [
            i
            for i in (previous.by_name.get(name, []) if previous else [])
            if i not in turn.answered
        ]
        if not pending:
            raise invalid_request(
                f"No function_call to {name!r} in the preceding assistant message to answer.",
                param=f"{param}.name",
            )
        result = self.turns.answer(pending[0], f"{param}.name", name)
        text = tool_result_content(content, f"{param}.content")
        if text is not None:
            result["content"] = text


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
        "input": call_arguments(
            function.get("arguments"), f"{param}.function.arguments", "function.arguments"
        ),
    }
    return block, param


def _legacy_call(call: object, param: str, n: int) -> Block:
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or not call["name"]:
        raise invalid_request("function_call needs a name and arguments.", param=param)
    return {
        "type": "tool_use",
        "id": f"call_legacy_{n}",
        "name": call["name"],
        "input": call_arguments(call.get("arguments"), f"{param}.arguments", "function.arguments"),
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
