"""Anthropic SSE events → OpenAI ``chat.completion.chunk`` dicts: a small state machine.

Theory of operation: ``feed`` is called once per upstream event, in order, and returns the
chunks to send now; ``finish`` is called once after the upstream stream ended cleanly. No
I/O, no clock: the caller owns both. The state is what OpenAI's chunk format needs and
Anthropic's events do not carry:

- ``_role_sent``: the first chunk carries ``role: "assistant"``, exactly once, with the
  first content block -- as OpenAI does: ``content: ""`` before text or reasoning,
  ``content: null`` before a tool call, so a reply that is only tool calls reassembles to
  ``content: null`` exactly like the non-streamed one. ``message_start`` emits nothing.
- ``_blocks``: Anthropic block index → what that block is. Tool calls are numbered per reply
  (0, 1, 2…) because OpenAI's ``tool_calls[].index`` counts tool calls, not blocks; thinking
  blocks likewise get their own numbering in ``thinking_blocks``.
- ``_usage``: Anthropic usage, cumulative. ``message_start`` gives input and cache counts,
  ``message_delta`` overwrites whatever it reports (its counts are totals, not increments).
- ``_finished``: the ``finish_reason`` chunk is emitted once, on the ``message_delta`` that
  carries the stop reason or, if none did, on ``message_stop`` (or ``finish``).

Invariants: every chunk has the same ``id``/``created``/``model`` and no
``system_fingerprint`` (OpenAI's schema types it a string, so strict validators refuse a
null, and the gateway has no fingerprint to give); with ``include_usage`` every chunk has ``usage: null`` except
the final ``choices: []`` chunk that ``finish`` returns; ``role``, tool-call ``id``/``type``/
``name`` appear once each, since OpenAI's accumulation concatenates repeated strings. A
thinking block's text streams as ``reasoning_content``; its complete form (with the signature
the client needs to send it back) is emitted once, as a ``thinking_blocks`` entry with an
``index``, when the block stops. An upstream ``error`` event raises ``UpstreamStreamError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, final

from ...upstream.errors import openai_error_body
from ...upstream.usage import merge_usage
from .response import finish_reason, thinking_block, tool_arguments, translate_usage

__all__ = ["StreamTranslator", "UpstreamStreamError"]


@final
class UpstreamStreamError(Exception):
    """The upstream sent an ``error`` event after its 200 status.

    ``error`` is the OpenAI error envelope (``{"error": {"message", "type", "param",
    "code"}}``) to send as the stream's last ``data:`` line; ``code`` is the Anthropic type.
    """

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["error"]["message"])
        self.error = error


@dataclass
class _Block:
    kind: Literal["text", "tool_use", "thinking", "redacted_thinking", "other"]
    number: int = 0  # tool call number or thinking block number within the reply
    wrote_arguments: bool = False
    start_input: object = None
    thinking: list[str] = field(default_factory=list)
    signature: str = ""
    data: str = ""


@final
class StreamTranslator:
    """Translate one upstream stream; create one per request.

    Args:
      model: echoed in every chunk (the client's model name).
      completion_id: the ``chatcmpl-…`` id of every chunk.
      created: unix seconds, the same in every chunk.
      include_usage: ``stream_options.include_usage`` — adds ``usage: null`` to every chunk
        and a final usage chunk from ``finish``.
    """

    def __init__(
        self, *, model: str, completion_id: str, created: int, include_usage: bool
    ) -> None:
        self._model = model
        self._id = completion_id
        self._created = created
        self._include_usage = include_usage
        self._role_sent = False
        self._finished = False
        self._closed = False
        self._blocks: dict[int, _Block] = {}
        self._tool_calls = 0
        self._thinking_blocks = 0
        self._usage: dict[str, Any] | None = None
        self._stop_reason: str | None = None

    # -- what the HTTP layer and metrics read ------------------------------------------

    @property
    def upstream_usage(self) -> dict[str, Any]:
        """The upstream's cumulative usage so far, in Anthropic's shape (``{}`` before any)."""
        return dict(self._usage or {})

    @property
    def final_usage(self) -> dict[str, Any] | None:
        """OpenAI usage (``translate_usage``) of what was reported so far; None before any."""
        return None if self._usage is None else translate_usage(self._usage)

    @property
    def stop_reason(self) -> str | None:
        """Anthropic's ``stop_reason``, once ``message_delta`` reported it."""
        return self._stop_reason

    @property
    def finished(self) -> bool:
        """True once the ``finish_reason`` chunk was emitted."""
        return self._finished

    # -- the state machine -------------------------------------------------------------

    def feed(self, event: str, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The chunks to send for one upstream event (often none, rarely more than two).

        ``event`` is the SSE event name; when it is empty or ``"message"`` the JSON's
        ``type`` is used. Unknown events, ``ping``, ``content_block_stop`` of text and tool
        blocks, ``signature_delta`` and ``citations_delta`` produce nothing.

        Raises:
          UpstreamStreamError: for an ``error`` event.
        """
        kind = event if event and event != "message" else str(data.get("type") or "")
        if kind == "error":
            error = data.get("error")
            raise UpstreamStreamError(
                openai_error_body(error if isinstance(error, Mapping) else {})
            )
        if kind == "message_start":
            message = data.get("message")
            usage = message.get("usage") if isinstance(message, Mapping) else None
            self._merge_usage(usage)
            return []
        if kind == "content_block_start":
            return self._block_start(data)
        if kind == "content_block_delta":
            return self._block_delta(data)
        if kind == "content_block_stop":
            return self._block_stop(data)
        if kind == "message_delta":
            delta = data.get("delta")
            self._merge_usage(data.get("usage"))
            if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
                return self._finish_chunk()
            return []
        if kind == "message_stop":
            return self._finish_chunk()
        return []

    def finish(self) -> list[dict[str, Any]]:
        """Chunks that close a cleanly ended stream: the ``finish_reason`` chunk if
        ``message_delta``/``message_stop`` never produced it, then the usage chunk when
        ``include_usage``. Returns ``[]`` when called again."""
        if self._closed:
            return []
        chunks = self._finish_chunk()
        self._closed = True
        if self._include_usage:
            chunks.append(
                {**self._envelope(), "choices": [], "usage": translate_usage(self._usage or {})}
            )
        return chunks

    # -- events ------------------------------------------------------------------------

    def _block_start(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = data.get("index")
        block = data.get("content_block")
        if not isinstance(index, int) or not isinstance(block, Mapping):
            return []
        kind = block.get("type")
        chunks = self._role_chunk(None if kind == "tool_use" else "")
        if kind == "text":
            self._blocks[index] = _Block("text")
            text = block.get("text")
            if isinstance(text, str) and text:
                chunks.append(self._chunk({"content": text}))
        elif kind == "tool_use":
            number = self._tool_calls
            self._tool_calls += 1
            self._blocks[index] = _Block("tool_use", number, start_input=block.get("input"))
            call = {
                "index": number,
                "id": str(block.get("id") or ""),
                "type": "function",
                "function": {"name": str(block.get("name") or ""), "arguments": ""},
            }
            chunks.append(self._chunk({"tool_calls": [call]}))
        elif kind in ("thinking", "redacted_thinking"):
            entry = _Block(
                "thinking" if kind == "thinking" else "redacted_thinking",
                self._thinking_blocks,
                signature=str(block.get("signature") or ""),
                data=str(block.get("data") or ""),
            )
            self._thinking_blocks += 1
            self._blocks[index] = entry
            text = block.get("thinking")
            if isinstance(text, str) and text:
                entry.thinking.append(text)
                chunks.append(self._chunk({"reasoning_content": text}))
        else:
            self._blocks[index] = _Block("other")
        return chunks

    def _block_delta(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = data.get("index")
        delta = data.get("delta")
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None or not isinstance(delta, Mapping):
            return []
        kind = delta.get("type")
        if kind == "text_delta" and block.kind == "text":
            text = delta.get("text")
            if isinstance(text, str) and text:
                return [self._chunk({"content": text})]
        elif kind == "input_json_delta" and block.kind == "tool_use":
            piece = delta.get("partial_json")
            if isinstance(piece, str) and piece:
                block.wrote_arguments = True
                fragment = {"index": block.number, "function": {"arguments": piece}}
                return [self._chunk({"tool_calls": [fragment]})]
        elif kind == "thinking_delta" and block.kind == "thinking":
            text = delta.get("thinking")
            if isinstance(text, str) and text:
                block.thinking.append(text)
                return [self._chunk({"reasoning_content": text})]
        elif kind == "signature_delta" and block.kind == "thinking":
            signature = delta.get("signature")
            if isinstance(signature, str):
                block.signature += signature
        return []

    def _block_stop(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = data.get("index")
        block = self._blocks.pop(index, None) if isinstance(index, int) else None
        if block is None:
            return []
        if block.kind == "tool_use" and not block.wrote_arguments:
            # No input_json_delta: the input is the start block's (usually {}), and the
            # client must still receive parseable arguments, as the non-stream reply has.
            fragment = {
                "index": block.number,
                "function": {"arguments": tool_arguments(block.start_input or {})},
            }
            return [self._chunk({"tool_calls": [fragment]})]
        if block.kind in ("thinking", "redacted_thinking"):
            entry = thinking_block(
                {
                    "type": block.kind,
                    "thinking": "".join(block.thinking),
                    "signature": block.signature,
                    "data": block.data,
                }
            )
            return [self._chunk({"thinking_blocks": [{"index": block.number, **entry}]})]
        return []

    # -- chunk construction ------------------------------------------------------------

    def _merge_usage(self, usage: object) -> None:
        if isinstance(usage, Mapping):
            merged = dict(self._usage or {})
            merge_usage(merged, usage)
            self._usage = merged

    def _envelope(self) -> dict[str, Any]:
        envelope: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
        }
        if self._include_usage:
            envelope["usage"] = None
        return envelope

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**self._envelope(), "choices": [choice]}

    def _role_chunk(self, content: str | None = "") -> list[dict[str, Any]]:
        if self._role_sent:
            return []
        self._role_sent = True
        return [self._chunk({"role": "assistant", "content": content})]

    def _finish_chunk(self) -> list[dict[str, Any]]:
        if self._finished:
            return []
        self._finished = True
        return [*self._role_chunk(), self._chunk({}, finish_reason(self._stop_reason))]
