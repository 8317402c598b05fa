"""Deterministic replies: what the simulated model says.

Theory of operation: ``build_reply`` is a pure function of the validated body, the
request's digest (see ``prompt.py``) and the reply length. It first lays out the *natural*
reply -- an optional thinking block, then one of

* tool calls, when custom tools are offered, ``tool_choice`` is not ``none`` and the last
  user turn holds no ``tool_result`` yet (``tool``: that tool; ``any`` / ``auto``: every
  offered tool, at most four, or just the first with ``disable_parallel_tool_use``; ``auto``
  prefixes a short text block);
* a JSON document valid for ``output_config.format``'s schema;
* a JSON object when the system prompt asks for JSON, as a model told to answer only in
  JSON does (what OpenAI-style JSON mode becomes upstream): an example of the JSON Schema
  the prompt spells out, if it holds one (instructor, pydantic-ai and the like put one
  there), else ``{"reply": ...}``;
* a text that mentions the tool results of the last user turn;
* a text echoing the first words of the last user message,

every block cut into token-sized *pieces* (one piece = one output token = one content delta
when streamed) -- and then generates it the way a model would: a stop sequence in a text
block ends the reply just before it (``stop_sequence``), and running out of ``max_tokens``
ends it mid-block (``max_tokens``; a tool call that does not fit is dropped whole), whichever
comes first. Streamed and non-streamed replies are renderings of the same ``Reply``.

This module lays the reply out and generates it; the parts live beside it: ``reply_data``
(``Block``, ``Reply`` and the ``Message`` JSON), ``reply_text`` (what text and thinking
blocks say, JSON documents) and ``reply_tools`` (tool calls, the tool results answered).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .faults import last_user_texts
from .prompt import InputUsage
from .reply_data import Block, Reply
from .reply_text import (
    ECHO_WORDS,
    JSON_PIECE_CHARS,
    LOREM,
    THINKING_TOKENS,
    first_words,
    json_pieces,
    schema_in,
    system_text,
    thinking_block,
    word_pieces,
)
from .reply_tools import (
    MAX_PARALLEL_TOOLS,
    asked_for,
    custom_tools,
    ends_with_user,
    tool_blocks,
    tool_results,
    user_texts,
)
from .schemas import example_value

__all__ = [
    "ECHO_WORDS",
    "JSON_PIECE_CHARS",
    "LOREM",
    "MAX_PARALLEL_TOOLS",
    "THINKING_TOKENS",
    "Block",
    "Reply",
    "build_reply",
]


def build_reply(
    body: Mapping[str, Any],
    *,
    digest: bytes,
    input_usage: InputUsage,
    reply_tokens: int,
) -> Reply:
    """The reply to a validated ``messages`` body (see the module docstring).

    Args:
      body: the validated request body.
      digest: the request's digest; all choices derive from it.
      input_usage: reported as is in ``usage``.
      reply_tokens: natural length of a text reply, in tokens.
    """
    rng = random.Random(digest)
    own = user_texts(body)
    echo = first_words(own or last_user_texts(body))
    blocks: list[Block] = []
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        blocks.append(thinking_block(echo, digest, rng))

    tools = custom_tools(body)
    choice = body.get("tool_choice") or {"type": "auto"}
    if choice["type"] == "auto":
        tools = asked_for(tools, " ".join(own))
    results = tool_results(body)
    fmt = (body.get("output_config") or {}).get("format")
    if tools and choice["type"] != "none" and results is None and ends_with_user(body):
        blocks.extend(tool_blocks(tools, choice, digest))
    elif isinstance(fmt, dict):
        blocks.append(Block("text", json_pieces(json.dumps(example_value(fmt["schema"])))))
    elif "JSON" in (system := system_text(body)):
        schema = schema_in(system) or schema_in(" ".join(last_user_texts(body)))
        if schema is not None:
            document: Any = example_value(schema)
        else:
            reply = "".join(word_pieces(f"Simulated reply to '{echo}':", reply_tokens, rng))
            document = {"reply": reply}
        blocks.append(Block("text", json_pieces(json.dumps(document))))
    elif results is not None:
        count, texts = results
        header = f"Simulated reply using {count} tool result(s): '{first_words(texts)}':"
        blocks.append(Block("text", word_pieces(header, reply_tokens, rng)))
    else:
        blocks.append(
            Block("text", word_pieces(f"Simulated reply to '{echo}':", reply_tokens, rng))
        )

    generated, stop_reason, stop_sequence = _generate(
        blocks, body.get("stop_sequences") or (), body["max_tokens"]
    )
    pieces = sum(len(b.pieces) for b in generated)
    return Reply(
        model=body["model"],
        blocks=tuple(generated),
        stop_reason=stop_reason,
        stop_sequence=stop_sequence,
        input_usage=input_usage,
        output_tokens=pieces if pieces or body["max_tokens"] == 0 else 1,
    )


# --------------------------------------------------------------------------- generation


def _generate(
    blocks: Sequence[Block], stop_sequences: Iterable[str], max_tokens: int
) -> tuple[list[Block], str, str | None]:
    """Emit ``blocks`` piece by piece until a stop sequence or ``max_tokens``."""
    out: list[Block] = []
    budget = max_tokens
    stops = tuple(stop_sequences)
    for block in blocks:
        hit: tuple[int, str] | None = None
        if block.type == "text" and stops:
            hit = _first_stop(block.text, stops)
            if hit is not None:
                block = replace(block, pieces=_cut(block.pieces, hit[0]))
        if len(block.pieces) > budget:
            if block.type != "tool_use" and budget > 0:
                out.append(replace(block, pieces=block.pieces[:budget]))
            return _drop_empty(out), "max_tokens", None
        budget -= len(block.pieces)
        out.append(block)
        if hit is not None:
            return _drop_empty(out), "stop_sequence", hit[1]
    stop_reason = "tool_use" if any(b.type == "tool_use" for b in out) else "end_turn"
    return _drop_empty(out), stop_reason, None


def _drop_empty(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.pieces or b.type != "text"]


def _first_stop(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, stop)
    return best


def _cut(pieces: tuple[str, ...], at: int) -> tuple[str, ...]:
    """The pieces covering ``text[:at]`` (the last one shortened)."""
    out: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) <= at:
            out.append(piece)
            used += len(piece)
            continue
        if at > used:
            out.append(piece[: at - used])
        break
    return tuple(out)
