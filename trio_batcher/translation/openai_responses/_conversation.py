"""Canonical Responses items (history, then input) → Anthropic ``system`` + ``messages``.

Theory of operation: one pass over the items, building *turns* with the builder the Chat
path uses (``_common.turns``): a turn is a run of same-role items once system and
developer messages are lifted out, so items map as

- ``message`` user → blocks of a user turn (text, images, PDFs: ``_common.content``);
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
from dataclasses import dataclass
from typing import Any, Final

from ...errors import invalid_request
from .._common.content import (
    Block,
    cache_control,
    image_block,
    is_blank,
    pdf_block,
    text_block,
)
from .._common.tool_calls import call_arguments, tool_use_id
from .._common.turns import Turns, Wording
from ._items import Item
from ._thinking import thinking_block
from ._tools import Tools, anthropic_tool_name

__all__ = ["Conversation", "convert_items"]

_WORDING: Final = Wording(
    unanswered="No function_call_output for function call {call_id!r}: every call must be "
    "answered by the items right after it.",
    stray="function_call_output {shown!r} answers no function_call of the assistant output "
    "right before it",
    stray_later=" (outputs must directly follow their calls).",
    twice="Function call {shown!r} is answered twice.",
    nothing="input must contain at least one message or function call output with content.",
    nothing_param="input",
)


@dataclass
class Conversation:
    system: list[Block]
    messages: list[dict[str, Any]]
    ignored: list[str]
    last_assistant: str | None  # path of the item that ends the conversation, if assistant


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
        self.turns = Turns(_WORDING)
        self.ignored: list[str] = []
        self.tool_ids: set[str] = set()

    def add(self, item: Item, param: str) -> None:
        kind = item["type"]
        if kind == "message" and item["role"] in ("system", "developer"):
            for j, part in enumerate(item["content"]):
                block = text_block(part["text"], part, f"{param}.content[{j}]")
                if block is not None:
                    self.system.append(block)
        elif kind == "message" and item["role"] == "user":
            blocks = [
                b
                for j, p in enumerate(item["content"])
                for b in part_blocks(p, f"{param}.content[{j}]")
            ]
            self.turns.add_user(blocks, f"{param}.content")
        elif kind == "message":
            texts = [
                p["text"] if p["type"] == "output_text" else p["refusal"] for p in item["content"]
            ]
            blocks = [{"type": "text", "text": t} for t in texts if not is_blank(t)]
            if blocks:
                self.turns.add_assistant(blocks, param)
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
            self.turns.add_assistant([block], param)

    def build(self) -> Conversation:
        last_assistant = self.turns.finish()
        return Conversation(
            system=self.system,
            messages=self.turns.messages(),
            ignored=self.ignored,
            last_assistant=last_assistant,
        )

    def _call(self, item: Item, param: str) -> None:
        call_id = tool_use_id(item["call_id"])
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
        turn = self.turns.add_assistant([], param)
        block: Block = {
            "type": "tool_use",
            "id": call_id,
            "name": name,
            "input": call_arguments(item["arguments"], f"{param}.arguments", "arguments"),
        }
        self.turns.add_call(turn, block, f"{param}.call_id")

    def _output(self, item: Item, param: str) -> None:
        call_id = tool_use_id(item["call_id"])
        result = self.turns.answer(call_id, f"{param}.call_id", item["call_id"])
        content = _output_content(item["output"], f"{param}.output")
        if content is not None:
            result["content"] = content


# -- content parts -----------------------------------------------------------------------


def part_blocks(part: Mapping[str, Any], where: str) -> list[Block]:
    """The Anthropic blocks of one user (or tool output) part; ``[]`` for blank text."""
    kind = part["type"]
    if kind == "input_text":
        block = text_block(part["text"], part, where)
        return [] if block is None else [block]
    if kind == "input_image":
        return [image_block(part["image_url"], part, where, "image_url")]
    if "file_data" not in part:
        return [_file_url(part, where)]
    return [pdf_block(part["file_data"], part.get("filename"), part, where, "file_data")]


def _file_url(part: Mapping[str, Any], where: str) -> Block:
    url = str(part["file_url"])
    if not url[:8].lower().startswith(("http://", "https://")):
        raise invalid_request("file_url must be an http(s) URL.", param=f"{where}.file_url")
    block: Block = {"type": "document", "source": {"type": "url", "url": url}}
    filename = part.get("filename")
    if filename:
        block["title"] = filename
    control = cache_control(part, where)
    if control is not None:
        block["cache_control"] = control
    return block


def _output_content(output: object, param: str) -> str | list[Block] | None:
    """A function call's output: a string stays one; parts become blocks (text, images,
    PDFs, all of which Anthropic takes in a tool result); None when empty."""
    if isinstance(output, str):
        return None if is_blank(output) else output
    blocks = [
        b
        for j, part in enumerate(output if isinstance(output, list) else ())
        for b in part_blocks(part, f"{param}[{j}]")
    ]
    return blocks or None
