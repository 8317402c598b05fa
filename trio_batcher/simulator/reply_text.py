"""The words of a reply: echoes, filler, thinking, and JSON when the prompt asks for it.

Everything a text or thinking block says is derived from the request (its last user words,
its system prompt) and the request's digest, so the same request always gets the same
reply (the digest mixes in the configured seed). Text is cut into word pieces, JSON into pieces of ``JSON_PIECE_CHARS`` characters:
one piece is one output token. A system prompt that asks for JSON gets an example of the
JSON Schema the prompt spells out, if it holds one, as a model told to answer in JSON would.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .faults import strip_directives
from .reply_data import Block

THINKING_TOKENS: Final = 16
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


def word_pieces(header: str, n_tokens: int, rng: random.Random) -> tuple[str, ...]:
    """``n_tokens`` word pieces: the header's words, then filler ending with a period."""
    words = header.split()[:n_tokens]
    while len(words) < n_tokens:
        words.append(rng.choice(LOREM))
    if len(words) > len(header.split()):
        words[-1] += "."
    return tuple(w if i == 0 else f" {w}" for i, w in enumerate(words))


def json_pieces(text: str) -> tuple[str, ...]:
    """``text`` (JSON) in pieces of ``JSON_PIECE_CHARS`` characters."""
    return tuple(text[i : i + JSON_PIECE_CHARS] for i in range(0, len(text), JSON_PIECE_CHARS))


_MAX_SCHEMA_SCAN: Final = 64  # "{" positions tried: prompts are long, schemas come early


def schema_in(text: str) -> dict[str, Any] | None:
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


def system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return " ".join(b.get("text", "") for b in system if isinstance(b, dict))
    return ""


def first_words(texts: Iterable[str]) -> str:
    words: list[str] = []
    for text in texts:
        words.extend(strip_directives(text).split())
        if len(words) >= ECHO_WORDS:
            break
    return " ".join(words[:ECHO_WORDS]) or "(no text)"


def thinking_block(echo: str, digest: bytes, rng: random.Random) -> Block:
    pieces = word_pieces(f"Simulated reasoning about '{echo}':", THINKING_TOKENS, rng)
    signature = base64.b64encode(
        hashlib.blake2b(digest + b"signature", digest_size=64).digest()
    ).decode()
    return Block("thinking", pieces, signature=signature)
