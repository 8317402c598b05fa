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
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, final

from .faults import last_user_texts, strip_directives
from .prompt import InputUsage
from .schemas import example_value

THINKING_TOKENS: Final = 16
MAX_PARALLEL_TOOLS: Final = 4
ECHO_WORDS: Final = 6
JSON_PIECE_CHARS: Final = 4

LOREM: Final = (
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
    "dolore",
    "magna",
    "aliqua",
    "enim",
    "ad",
    "minim",
    "veniam",
    "quis",
)

_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@final
@dataclass(frozen=True, slots=True)
class Block:
    """One content block of a reply, as the pieces it is generated (and streamed) in.

    ``pieces`` are text for ``text``, thinking text for ``thinking`` and fragments of the
    input's JSON for ``tool_use``; each is one output token.
    """

    type: str
    pieces: tuple[str, ...]
    id: str = ""
    name: str = ""
    input: Mapping[str, Any] | None = None
    signature: str = ""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def to_json(self) -> dict[str, Any]:
        if self.type == "tool_use":
            return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}
        if self.type == "thinking":
            return {"type": "thinking", "thinking": self.text, "signature": self.signature}
        return {"type": "text", "text": self.text}


@final
@dataclass(frozen=True, slots=True)
class Reply:
    """A complete reply; ``output_tokens`` counts every piece (at least 1 unless
    ``max_tokens`` was 0)."""

    model: str
    blocks: tuple[Block, ...]
    stop_reason: str
    stop_sequence: str | None
    input_usage: InputUsage
    output_tokens: int

    @property
    def token_pieces(self) -> int:
        """Content deltas a stream of this reply carries (the latency model's token count)."""
        return sum(len(b.pieces) for b in self.blocks)

    def usage_json(self, output_tokens: int | None = None) -> dict[str, Any]:
        u = self.input_usage
        return {
            "input_tokens": u.input_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": u.ephemeral_5m_input_tokens,
                "ephemeral_1h_input_tokens": u.ephemeral_1h_input_tokens,
            },
            "output_tokens": self.output_tokens if output_tokens is None else output_tokens,
            "service_tier": "standard",
        }

    def message_json(self, message_id: str) -> dict[str, Any]:
        """The non-streamed ``Message`` object."""
        return {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [b.to_json() for b in self.blocks],
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": self.usage_json(),
        }


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
    echo = _first_words(last_user_texts(body))
    blocks: list[Block] = []
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        blocks.append(_thinking_block(echo, digest, rng))

    tools = _custom_tools(body)
    choice = body.get("tool_choice") or {"type": "auto"}
    results = _tool_results(body)
    fmt = (body.get("output_config") or {}).get("format")
    if tools and choice["type"] != "none" and results is None and _ends_with_user(body):
        blocks.extend(_tool_blocks(tools, choice, digest))
    elif isinstance(fmt, dict):
        blocks.append(Block("text", _chunks(json.dumps(example_value(fmt["schema"])))))
    elif "JSON" in (system := _system_text(body)):
        schema = _schema_in(system) or _schema_in(" ".join(last_user_texts(body)))
        if schema is not None:
            document: Any = example_value(schema)
        else:
            reply = "".join(_words(f"Simulated reply to '{echo}':", reply_tokens, rng))
            document = {"reply": reply}
        blocks.append(Block("text", _chunks(json.dumps(document))))
    elif results is not None:
        count, texts = results
        header = f"Simulated reply using {count} tool result(s): '{_first_words(texts)}':"
        blocks.append(Block("text", _words(header, reply_tokens, rng)))
    else:
        blocks.append(Block("text", _words(f"Simulated reply to '{echo}':", reply_tokens, rng)))

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


# --------------------------------------------------------------------------- content


def _words(header: str, n_tokens: int, rng: random.Random) -> tuple[str, ...]:
    """``n_tokens`` word pieces: the header's words, then filler ending with a period."""
    words = header.split()[:n_tokens]
    while len(words) < n_tokens:
        words.append(rng.choice(LOREM))
    if len(words) > len(header.split()):
        words[-1] += "."
    return tuple(w if i == 0 else f" {w}" for i, w in enumerate(words))


def _chunks(text: str) -> tuple[str, ...]:
    return tuple(text[i : i + JSON_PIECE_CHARS] for i in range(0, len(text), JSON_PIECE_CHARS))


_MAX_SCHEMA_SCAN: Final = 64  # "{" positions tried: prompts are long, schemas come early


def _schema_in(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` that looks like a JSON Schema (it has
    ``properties``), if any."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    for _ in range(_MAX_SCHEMA_SCAN):
        if start < 0:
            return None
        try:
            found, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(found, dict) and isinstance(found.get("properties"), dict):
            return found
        start = text.find("{", end)
    return None


def _system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return " ".join(b.get("text", "") for b in system if isinstance(b, dict))
    return ""


def _first_words(texts: Iterable[str]) -> str:
    words: list[str] = []
    for text in texts:
        words.extend(strip_directives(text).split())
        if len(words) >= ECHO_WORDS:
            break
    return " ".join(words[:ECHO_WORDS]) or "(no text)"


def _thinking_block(echo: str, digest: bytes, rng: random.Random) -> Block:
    pieces = _words(f"Simulated reasoning about '{echo}':", THINKING_TOKENS, rng)
    signature = base64.b64encode(
        hashlib.blake2b(digest + b"signature", digest_size=64).digest()
    ).decode()
    return Block("thinking", pieces, signature=signature)


def _custom_tools(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in body.get("tools") or () if t.get("type") in (None, "custom")]


def _ends_with_user(body: Mapping[str, Any]) -> bool:
    roles = [m["role"] for m in body["messages"] if m["role"] != "system"]
    return bool(roles) and roles[-1] == "user"


def _tool_results(body: Mapping[str, Any]) -> tuple[int, list[str]] | None:
    """How many ``tool_result`` blocks the trailing user turn holds, and their texts;
    None when it holds none."""
    count = 0
    texts: list[str] = []
    for message in reversed(body["messages"]):
        if message["role"] == "system":
            continue
        if message["role"] != "user":
            break
        content = message["content"]
        if isinstance(content, str):
            continue
        for block in content:
            if block["type"] != "tool_result":
                continue
            count += 1
            inner = block.get("content")
            if isinstance(inner, str):
                texts.append(inner)
            elif isinstance(inner, list):
                texts.extend(b["text"] for b in inner if b.get("type") == "text")
    return (count, texts) if count else None


def _tool_blocks(
    tools: list[Mapping[str, Any]], choice: Mapping[str, Any], digest: bytes
) -> list[Block]:
    if choice["type"] == "tool":
        chosen = [t for t in tools if t["name"] == choice["name"]][:1]
    elif choice.get("disable_parallel_tool_use"):
        chosen = tools[:1]
    else:
        chosen = tools[:MAX_PARALLEL_TOOLS]
    blocks: list[Block] = []
    if choice["type"] == "auto":
        names = ", ".join(t["name"] for t in chosen)
        blocks.append(Block("text", tuple(_as_pieces(f"I will call {names}."))))
    for i, tool in enumerate(chosen):
        tool_input = example_value(tool["input_schema"])
        blocks.append(
            Block(
                "tool_use",
                _chunks(json.dumps(tool_input)),
                id=_tool_id(digest, i),
                name=tool["name"],
                input=tool_input,
            )
        )
    return blocks


def _as_pieces(text: str) -> list[str]:
    words = text.split()
    return [w if i == 0 else f" {w}" for i, w in enumerate(words)]


def _tool_id(digest: bytes, index: int) -> str:
    number = int.from_bytes(hashlib.blake2b(digest + bytes([index]), digest_size=16).digest())
    chars = []
    for _ in range(22):
        number, rest = divmod(number, 62)
        chars.append(_BASE62[rest])
    return "toolu_01" + "".join(chars)
