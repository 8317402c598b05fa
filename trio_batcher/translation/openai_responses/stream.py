"""Anthropic SSE events → Responses stream events: a small state machine.

Theory of operation: ``feed`` is called once per upstream event, in order, and returns the
events (dicts) to send now; ``finish`` once after the upstream stream ended whole; ``fail``
when it did not. No I/O, no clock. Every event has ``type`` and ``sequence_number``
(0, 1, 2… over the whole stream). The sequence is the one OpenAI's SDKs fold
(``openai.lib.streaming.responses.ResponseStreamState``):

- ``message_start`` → ``response.created``, ``response.in_progress`` (status
  ``in_progress``, ``output: []``); a background response announces itself earlier, when
  it is accepted (``queued``: ``response.created`` and ``response.queued``, status
  ``queued``), and then ``message_start`` gives only ``response.in_progress``;
- a content block → ``response.output_item.added`` at its start, its deltas, and at its
  stop the ``….done`` events and ``response.output_item.done``:
  text: ``content_part.added`` / ``output_text.delta``* / ``output_text.done`` /
  ``content_part.done``; tool_use: ``function_call_arguments.delta``* / ``.done`` (a call
  whose input came whole in its start block gets that input as one delta, so the folded
  arguments equal the final ones); thinking: ``reasoning_summary_part.added`` (at the
  first text) / ``reasoning_summary_text.delta``* / ``.done`` / ``reasoning_summary_part.done``,
  the ``signature_delta`` becoming the item's ``encrypted_content``;
- ``message_stop`` (or ``finish``, if the upstream ended without one) → the one terminal
  event, ``response.completed`` or ``response.incomplete``, carrying the whole response;
- ``fail`` → ``response.failed`` with ``error`` and whatever output there was (items not
  finished are ``incomplete``), never a silently truncated stream.

``final`` is the complete internal response (with every reasoning item's
``encrypted_content``: see ``response.client_view``), set before the terminal event is
returned, so the caller can store the response before the client sees it end. Events carry
the client's view. After the terminal event, everything returns ``[]``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, final

from ...upstream.usage import merge_usage
from ..openai_chat.response import tool_arguments
from ._ids import output_item_id
from .request import ResponsesRequest
from .response import (
    function_call_item,
    item_view,
    message_item,
    output_text,
    reasoning_item,
    response_object,
    status_for,
    usage_for,
)

__all__ = ["ResponsesStreamTranslator"]

Event = dict[str, Any]


@dataclass
class _Open:
    """A content block whose item has been added but not yet done."""

    kind: Literal["text", "tool_use", "thinking", "redacted_thinking"]
    index: int  # output_index
    item_id: str
    pieces: list[str] = field(default_factory=list)  # text, arguments or thinking text
    call_id: str = ""
    name: str = ""
    start_input: object = None
    signature: str = ""
    data: str = ""
    summary_open: bool = False


@final
class ResponsesStreamTranslator:
    """Translate one upstream stream; create one per request."""

    def __init__(
        self, tr: ResponsesRequest, *, response_id: str, created_at: int, include: Collection[str]
    ) -> None:
        self._tr = tr
        self._id = response_id
        self._created_at = created_at
        self._include = include
        self._sequence = 0
        self._started = False
        self._queued = False
        self._output: list[dict[str, Any] | None] = []  # done items; None while open
        self._open: dict[int, _Open] = {}  # Anthropic block index → open item
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self.final: dict[str, Any] | None = None

    # -- the state machine -------------------------------------------------------------

    def feed(self, name: str, data: Mapping[str, Any]) -> list[Event]:
        """The events to send for one upstream event (unknown events give none)."""
        if self.final is not None:
            return []
        kind = name if name and name != "message" else str(data.get("type") or "")
        if kind == "message_start":
            message = data.get("message")
            merge_usage(self._usage, message.get("usage") if isinstance(message, Mapping) else None)
            return self._start()
        if kind == "content_block_start":
            return self._block_start(data)
        if kind == "content_block_delta":
            return self._block_delta(data)
        if kind == "content_block_stop":
            index = data.get("index")
            return self._block_stop(index) if isinstance(index, int) else []
        if kind == "message_delta":
            merge_usage(self._usage, data.get("usage"))
            delta = data.get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            return []
        if kind == "message_stop":
            return self._terminal()
        return []

    def finish(self) -> list[Event]:
        """Close a stream that ended whole: the terminal event, unless already sent."""
        return [] if self.final is not None else self._terminal()

    def fail(self, code: str, message: str) -> list[Event]:
        """``response.failed`` with ``error {code, message}``; ``[]`` after the terminal event."""
        if self.final is not None:
            return []
        events = self._start()
        unfinished = {block.index: self._unfinished(block) for block in self._open.values()}
        output = [
            item if item is not None else unfinished[i]
            for i, item in enumerate(self._output)
            if item is not None or i in unfinished
        ]
        self.final = self._response(
            "failed", output, usage=usage_for(self._usage), error={"code": code, "message": message}
        )
        return [*events, self._event("response.failed", response=self._client(self.final))]

    def queued(self) -> list[Event]:
        """A background response's first events, sent when it is accepted:
        ``response.created`` and ``response.queued`` (status ``queued``). Once only, and
        only before anything else."""
        if self._queued or self._started:
            return []
        self._queued = True
        snapshot = self._client(self._response("queued", [], usage=None))
        return [
            self._event("response.created", response=snapshot),
            self._event("response.queued", response=snapshot),
        ]

    # -- events ------------------------------------------------------------------------

    def _start(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        snapshot = self._client(self._response("in_progress", [], usage=None))
        if self._queued:  # created was sent with the queued status
            return [self._event("response.in_progress", response=snapshot)]
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def _block_start(self, data: Mapping[str, Any]) -> list[Event]:
        index = data.get("index")
        block = data.get("content_block")
        if not isinstance(index, int) or not isinstance(block, Mapping) or index in self._open:
            return []
        kind = block.get("type")
        events = self._start()
        position = len(self._output)
        if kind == "text":
            opened = _Open("text", position, output_item_id(self._id, "msg", position))
            item = message_item(opened.item_id, "", "in_progress")
        elif kind == "tool_use":
            opened = _Open(
                "tool_use",
                position,
                output_item_id(self._id, "fc", position),
                call_id=str(block.get("id") or ""),
                name=str(block.get("name") or ""),
                start_input=block.get("input"),
            )
            item = function_call_item(
                opened.item_id, opened.call_id, opened.name, "", self._tr.tool_names, "in_progress"
            )
        elif kind in ("thinking", "redacted_thinking"):
            opened = _Open(
                "thinking" if kind == "thinking" else "redacted_thinking",
                position,
                output_item_id(self._id, "rs", position),
                signature=str(block.get("signature") or ""),
                data=str(block.get("data") or ""),
            )
            item = reasoning_item(opened.item_id, None)
        else:
            return events  # a server tool's block: never asked for, not relayed
        self._open[index] = opened
        self._output.append(None)
        events.append(self._event("response.output_item.added", output_index=position, item=item))
        if kind == "text":
            events.append(self._part_event("response.content_part.added", opened, ""))
        initial = block.get("text") if kind == "text" else block.get("thinking")
        if isinstance(initial, str) and initial:
            events += self._text(opened, initial)
        return events

    def _block_delta(self, data: Mapping[str, Any]) -> list[Event]:
        index = data.get("index")
        delta = data.get("delta")
        opened = self._open.get(index) if isinstance(index, int) else None
        if opened is None or not isinstance(delta, Mapping):
            return []
        kind = delta.get("type")
        if kind == "text_delta" and opened.kind == "text":
            return self._text(opened, delta.get("text"))
        if kind == "thinking_delta" and opened.kind == "thinking":
            return self._text(opened, delta.get("thinking"))
        if kind == "input_json_delta" and opened.kind == "tool_use":
            piece = delta.get("partial_json")
            if isinstance(piece, str) and piece:
                opened.pieces.append(piece)
                return [self._arguments_delta(opened, piece)]
        elif kind == "signature_delta" and opened.kind == "thinking":
            signature = delta.get("signature")
            if isinstance(signature, str):
                opened.signature += signature
        return []

    def _text(self, opened: _Open, piece: object) -> list[Event]:
        if not isinstance(piece, str) or not piece:
            return []
        opened.pieces.append(piece)
        if opened.kind == "text":
            return [self._text_event("response.output_text.delta", opened, delta=piece)]
        events = []
        if not opened.summary_open:
            opened.summary_open = True
            events.append(self._summary_event("response.reasoning_summary_part.added", opened, ""))
        events.append(
            self._event(
                "response.reasoning_summary_text.delta",
                item_id=opened.item_id,
                output_index=opened.index,
                summary_index=0,
                delta=piece,
            )
        )
        return events

    def _block_stop(self, index: int) -> list[Event]:
        opened = self._open.pop(index, None)
        if opened is None:
            return []
        text = "".join(opened.pieces)
        events: list[Event] = []
        if opened.kind == "text":
            item = message_item(opened.item_id, text)
            events.append(self._text_event("response.output_text.done", opened, text=text))
            events.append(self._part_event("response.content_part.done", opened, text))
        elif opened.kind == "tool_use":
            if not opened.pieces:  # the input came whole in the start block (or is empty)
                text = tool_arguments(opened.start_input or {})
                events.append(self._arguments_delta(opened, text))
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=opened.item_id,
                    output_index=opened.index,
                    arguments=text,
                )
            )
            item = function_call_item(
                opened.item_id, opened.call_id, opened.name, text, self._tr.tool_names
            )
        else:
            if opened.summary_open:
                events.append(
                    self._event(
                        "response.reasoning_summary_text.done",
                        item_id=opened.item_id,
                        output_index=opened.index,
                        summary_index=0,
                        text=text,
                    )
                )
                events.append(
                    self._summary_event("response.reasoning_summary_part.done", opened, text)
                )
            item = reasoning_item(opened.item_id, self._block(opened))
        self._output[opened.index] = item
        events.append(
            self._event(
                "response.output_item.done",
                output_index=opened.index,
                item=item_view(item, self._include),
            )
        )
        return events

    def _terminal(self) -> list[Event]:
        events = self._start()
        for index in list(self._open):  # blocks the upstream never stopped
            events += self._block_stop(index)
        status, details = status_for(self._stop_reason)
        output = [item for item in self._output if item is not None]
        self.final = self._response(
            status, output, usage=usage_for(self._usage), incomplete_details=details
        )
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=self._client(self.final))]

    # -- construction ------------------------------------------------------------------

    def _block(self, opened: _Open) -> dict[str, Any]:
        if opened.kind == "redacted_thinking":
            return {"type": "redacted_thinking", "data": opened.data}
        return {
            "type": "thinking",
            "thinking": "".join(opened.pieces),
            "signature": opened.signature,
        }

    def _unfinished(self, opened: _Open) -> dict[str, Any]:
        text = "".join(opened.pieces)
        if opened.kind == "text":
            return message_item(opened.item_id, text, "incomplete")
        if opened.kind == "tool_use":
            return function_call_item(
                opened.item_id, opened.call_id, opened.name, text, self._tr.tool_names, "incomplete"
            )
        item = reasoning_item(opened.item_id, None)
        if text:
            item["summary"] = [{"type": "summary_text", "text": text}]
        item["status"] = "incomplete"
        return item

    def _response(self, status: str, output: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        return response_object(
            self._tr,
            response_id=self._id,
            created_at=self._created_at,
            status=status,
            output=output,
            **fields,
        )

    def _client(self, response: dict[str, Any]) -> dict[str, Any]:
        return {**response, "output": [item_view(i, self._include) for i in response["output"]]}

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _text_event(self, kind: str, opened: _Open, **fields: Any) -> Event:
        return self._event(
            kind,
            item_id=opened.item_id,
            output_index=opened.index,
            content_index=0,
            logprobs=[],
            **fields,
        )

    def _part_event(self, kind: str, opened: _Open, text: str) -> Event:
        return self._event(
            kind,
            item_id=opened.item_id,
            output_index=opened.index,
            content_index=0,
            part=output_text(text),
        )

    def _summary_event(self, kind: str, opened: _Open, text: str) -> Event:
        return self._event(
            kind,
            item_id=opened.item_id,
            output_index=opened.index,
            summary_index=0,
            part={"type": "summary_text", "text": text},
        )

    def _arguments_delta(self, opened: _Open, piece: str) -> Event:
        return self._event(
            "response.function_call_arguments.delta",
            item_id=opened.item_id,
            output_index=opened.index,
            delta=piece,
        )
