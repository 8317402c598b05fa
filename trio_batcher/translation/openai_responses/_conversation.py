"""Canonical Responses items (history, then input) → Anthropic ``system`` + ``messages``.

Theory of operation: one pass over the items, building *turns* exactly as the Chat path
does (``openai_chat/_messages.py``): a turn is a run of same-role items once system and
developer messages are lifted out, so items map as

- ``message`` user → blocks of a user turn (text, images, PDFs via the Chat content helpers);
- ``function_call_output`` → a ``tool_result`` of a user turn, placed before the turn's
  other blocks (Anthropic's rule), ``call_id`` → ``tool_use_id``;
- ``message`` assistant → text blocks (``output_text`` and ``refusal`` parts alike);
  ``function_call`` → a ``tool_use`` block (``call_id`` → ``id``, ``namespace`` + ``name``
  → the Anthropic tool name); ``reasoning`` → its thinking block (``_thinking``), in item
  order, so consecutive calls and their reasoning form one assistant turn and consecutive
  outputs one user turn.

System and developer messages, wherever they sit, join the top-level ``system`` in order
(after ``instructions``). Why, even in mid-conversation: Anthropic has no system turn
inside ``messages`` (but under a beta), and inlining one as user text would hand the
client's instructions the user's authority; Codex sends its whole system prompt as leading
``developer`` messages, which this maps exactly. The cost is that a developer message added
late changes the system prompt, so the prompt cache restarts there.

Tool pairing is checked the way Anthropic enforces it: an output must answer a call of the
assistant turn right before its turn, once; every call must be answered in the next turn.
A reasoning item without our ``encrypted_content`` cannot become thinking (no signature):
it is dropped and named in ignored params. Errors name ``input[i]…`` (or
``previous_response_id`` for a history item).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ...errors import ProxyError, invalid_request
from ..openai_chat import _content as chat_content
from ..openai_chat import _messages as chat_messages
from ._items import Item
from ._thinking import thinking_block
from ._tools import Tools, anthropic_tool_name

__all__ = ["Conversation", "convert_items"]

Block = dict[str, Any]
_HERE: Final = "\x00"  # placeholder path for one part handed to the Chat helpers
# Chat part paths → Responses part paths (``image_url.url`` is ``image_url`` here).
_PART_FIELDS: Final = (
    (".image_url.url", ".image_url"),
    (".file.file_data", ".file_data"),
    (".file.file_id", ".file_id"),
    (".file", ""),
)
_CACHE_KEYS: Final = ("cache_control", "prompt_cache_breakpoint")


@dataclass
class Conversation:
    system: list[Block]
    messages: list[dict[str, Any]]
    ignored: list[str]
    last_assistant: str | None  # path of the item that ends the conversation, if assistant


@dataclass
class _Turn:
    role: Literal["user", "assistant"]
    blocks: list[Block] = field(default_factory=list)
    results: list[Block] = field(default_factory=list)
    calls: dict[str, str] = field(default_factory=dict)  # tool_use id → param of the call
    answered: set[str] = field(default_factory=set)
    empty_param: str | None = None
    last_param: str | None = None


def convert_items(items: Sequence[tuple[Item, str]], tools: Tools) -> Conversation:
    """Convert ``(item, param)`` pairs, oldest first.

    Raises:
      ProxyError: 400 ``invalid_request_error`` naming the item at fault.
    """
    builder = _Builder(tools)
    for item, param in items:
        builder.add(item, param)
    return builder.build()


class _Builder:
    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self.system: list[Block] = []
        self.turns: list[_Turn] = []
        self.ignored: list[str] = []
        self.tool_ids: set[str] = set()

    def add(self, item: Item, param: str) -> None:
        kind = item["type"]
        if kind == "message" and item["role"] in ("system", "developer"):
            parts = [_chat_part(p) for p in item["content"]]
            self.system.extend(chat_content.system_blocks(parts, f"{param}.content"))
        elif kind == "message" and item["role"] == "user":
            blocks = [
                b
                for j, p in enumerate(item["content"])
                for b in part_blocks(p, f"{param}.content[{j}]")
            ]
            turn = self._turn("user")
            if not blocks and turn.empty_param is None:
                turn.empty_param = f"{param}.content"
            turn.blocks.extend(blocks)
        elif kind == "message":
            parts = [
                {"type": "text", "text": p["text"]} if p["type"] == "output_text" else p
                for p in item["content"]
            ]
            blocks = chat_content.assistant_blocks(parts, f"{param}.content")
            if blocks:
                turn = self._turn("assistant")
                turn.blocks.extend(blocks)
                turn.last_param = param
        elif kind == "function_call":
            self._call(item, param)
        elif kind == "function_call_output":
            self._output(item, param)
        else:  # reasoning
            block = thinking_block(item)
            if block is None:
                if param != "previous_response_id":
                    self.ignored.append(param)
                return
            turn = self._turn("assistant")
            turn.blocks.append(block)
            turn.last_param = param

    def build(self) -> Conversation:
        self._close_turn()
        if self.turns and self.turns[-1].role == "assistant":
            _check_answered(self.turns[-1], set())
        last_assistant = self._strip_final_prefill()
        if not self.turns:
            raise invalid_request(
                "input must contain at least one message or function call output with content.",
                param="input",
            )
        return Conversation(
            system=self.system,
            messages=[{"role": t.role, "content": t.results + t.blocks} for t in self.turns],
            ignored=self.ignored,
            last_assistant=last_assistant,
        )

    # -- turns ---------------------------------------------------------------------------

    def _turn(self, role: Literal["user", "assistant"]) -> _Turn:
        if self.turns and self.turns[-1].role == role:
            return self.turns[-1]
        self._close_turn()
        self.turns.append(_Turn(role))
        return self.turns[-1]

    def _previous_assistant(self) -> _Turn | None:
        if len(self.turns) >= 2 and self.turns[-1].role == "user":
            return self.turns[-2]
        return None

    def _close_turn(self) -> None:
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

    def _strip_final_prefill(self) -> str | None:
        """A final assistant turn is a prefill: Anthropic rejects its trailing whitespace."""
        if not self.turns or self.turns[-1].role != "assistant":
            return None
        turn = self.turns[-1]
        if turn.blocks and turn.blocks[-1]["type"] == "text":
            text = turn.blocks[-1]["text"].rstrip()
            if text:
                turn.blocks[-1] = {**turn.blocks[-1], "text": text}
            else:
                turn.blocks.pop()
        if not turn.blocks:
            self.turns.pop()
            return None
        return turn.last_param

    # -- tool calls ----------------------------------------------------------------------

    def _call(self, item: Item, param: str) -> None:
        call_id = chat_messages.tool_use_id(item["call_id"])
        if call_id in self.tool_ids:
            raise invalid_request(
                f"call_id must be unique in a conversation; {item['call_id']!r} repeats.",
                param=f"{param}.call_id",
            )
        self.tool_ids.add(call_id)
        namespace = item.get("namespace")
        name = self.tools.by_client.get((namespace, item["name"])) or anthropic_tool_name(
            namespace, item["name"]
        )
        turn = self._turn("assistant")
        turn.calls[call_id] = f"{param}.call_id"
        turn.blocks.append(
            {
                "type": "tool_use",
                "id": call_id,
                "name": name,
                "input": _arguments(item["arguments"], f"{param}.arguments"),
            }
        )
        turn.last_param = param

    def _output(self, item: Item, param: str) -> None:
        turn = self._turn("user")
        call_id = chat_messages.tool_use_id(item["call_id"])
        previous = self._previous_assistant()
        where = f"{param}.call_id"
        if previous is None or call_id not in previous.calls:
            earlier = any(call_id in t.calls for t in self.turns[:-2])
            raise invalid_request(
                f"function_call_output {item['call_id']!r} answers no function_call of the "
                "assistant output right before it"
                + (" (outputs must directly follow their calls)." if earlier else "."),
                param=where,
            )
        if call_id in turn.answered:
            raise invalid_request(
                f"Function call {item['call_id']!r} is answered twice.", param=where
            )
        turn.answered.add(call_id)
        result: Block = {"type": "tool_result", "tool_use_id": call_id}
        content = _output_content(item["output"], f"{param}.output")
        if content is not None:
            result["content"] = content
        turn.results.append(result)


def _check_answered(assistant: _Turn, answered: set[str]) -> None:
    for call_id, param in assistant.calls.items():
        if call_id not in answered:
            raise invalid_request(
                f"No function_call_output for function call {call_id!r}: every call must be "
                "answered by the items right after it.",
                param=param,
            )


def _arguments(raw: str, param: str) -> dict[str, Any]:
    """``arguments`` parsed by the Chat path's rules (strict JSON, bounded depth, an object)."""
    try:
        return chat_messages._arguments(raw, param)
    except ProxyError as exc:
        exc.message = exc.message.replace("function.arguments", "arguments")
        raise


# -- content parts -----------------------------------------------------------------------


def _chat_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A canonical input part in Chat's shape, for the Chat content helpers."""
    marks = {k: part[k] for k in _CACHE_KEYS if k in part}
    kind = part["type"]
    if kind == "input_text":
        return {"type": "text", "text": part["text"], **marks}
    if kind == "input_image":
        return {"type": "image_url", "image_url": {"url": part["image_url"]}, **marks}
    file = {"file_data": part.get("file_data"), "filename": part.get("filename")}
    return {"type": "file", "file": file, **marks}


def part_blocks(part: Mapping[str, Any], where: str) -> list[Block]:
    """The Anthropic blocks of one user (or tool output) part; ``[]`` for blank text."""
    if part["type"] == "input_file" and "file_data" not in part:
        return [_file_url(part, where)]
    try:
        return chat_content.user_blocks([_chat_part(part)], _HERE)
    except ProxyError as exc:
        rest = (exc.param or "").removeprefix(f"{_HERE}[0]")
        for chat, ours in _PART_FIELDS:
            if rest.startswith(chat):
                rest = ours + rest[len(chat) :]
                break
        exc.param = where + rest
        exc.message = exc.message.replace("image_url.url", "image_url").replace("file.", "")
        raise


def _file_url(part: Mapping[str, Any], where: str) -> Block:
    url = str(part["file_url"])
    if not url[:8].lower().startswith(("http://", "https://")):
        raise invalid_request("file_url must be an http(s) URL.", param=f"{where}.file_url")
    block: Block = {"type": "document", "source": {"type": "url", "url": url}}
    filename = part.get("filename")
    if filename:
        block["title"] = filename
    control = chat_content.cache_control(part, where)
    if control is not None:
        block["cache_control"] = control
    return block


def _output_content(output: object, param: str) -> str | list[Block] | None:
    """A function call's output: a string stays one; parts become blocks (text, images,
    PDFs, all of which Anthropic takes in a tool result); None when empty."""
    if isinstance(output, str):
        return None if chat_content.is_blank(output) else output
    blocks = [
        b
        for j, part in enumerate(output if isinstance(output, list) else ())
        for b in part_blocks(part, f"{param}[{j}]")
    ]
    return blocks or None
