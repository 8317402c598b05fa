"""Input-token accounting and the simulated prompt cache.

Theory of operation: a request is serialised once, canonically (sorted keys, compact), in
two disjoint parts -- the prompt (``tools``, ``system``, ``messages``) and the remaining
parameters minus ``stream``. The prompt's length / 4 is the input token count (so
``count_tokens`` and ``messages`` agree, and key order or whitespace never matter); a hash
of both parts plus the seed is the request's *digest*, from which reply content is derived
(so a streamed and a non-streamed request get the same reply).

Prompt caching: when a tool, system block or message block carries ``cache_control`` (or
the request has top-level ``cache_control``, which marks the last block), the prefix up to
the last breakpoint is hashed with the model name. The first time a prefix is seen its tokens
are reported as ``cache_creation_input_tokens``; while its entry lives (5 minutes or 1 hour
after its last use, per its ``ttl``; at most ``capacity`` entries, least recently used
evicted) they are reported as ``cache_read_input_tokens``. The prefix's tokens are taken out
of ``input_tokens``, so ``input + creation + read`` is the request's total, as in the API.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from ..token_estimate import tokens_for

_PROMPT_KEYS: Final = ("tools", "system", "messages")
_NOT_PARAMS: Final = frozenset({*_PROMPT_KEYS, "stream"})
_TTL_SECONDS: Final[Mapping[str, float]] = {"5m": 300.0, "1h": 3600.0}


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@final
@dataclass(frozen=True, slots=True)
class CachePoint:
    """The cacheable prefix of a prompt: its identity, size and lifetime."""

    key: bytes
    tokens: int
    ttl: str  # "5m" | "1h"


@final
@dataclass(frozen=True, slots=True)
class Prompt:
    """What the simulator needs to know about a request's input."""

    digest: bytes
    input_tokens: int
    cache_point: CachePoint | None


def analyse_prompt(body: Mapping[str, Any], *, seed: int, cache_hint: bool = True) -> Prompt:
    """Token count, reply digest and cache prefix of a *valid* request body.

    Args:
      body: the validated body (``messages`` or ``count_tokens`` shape).
      seed: mixed into the digest, so different seeds give different replies.
      cache_hint: False when the raw body cannot contain ``cache_control`` (a cheap
        substring test by the caller), which skips the prefix walk.
    """
    prompt = _canonical([body.get(k) for k in _PROMPT_KEYS])
    params = _canonical({k: v for k, v in body.items() if k not in _NOT_PARAMS})
    digest = hashlib.blake2b(f"{seed}\x00{params}\x00{prompt}".encode(), digest_size=16).digest()
    total = tokens_for(len(prompt))
    point = _cache_point(body, total) if cache_hint else None
    return Prompt(digest=digest, input_tokens=total, cache_point=point)


def _segments(body: Mapping[str, Any]) -> list[Any]:
    """Cacheable units in cache order: tools, system blocks, message blocks."""
    out: list[Any] = []
    tools = body.get("tools")
    if isinstance(tools, list):
        out.extend(tools)
    system = body.get("system")
    if isinstance(system, list):
        out.extend(system)
    elif isinstance(system, str) and system:
        out.append(system)
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            out.extend(content)
        else:
            out.append(content)
    return out


def _cache_point(body: Mapping[str, Any], total: int) -> CachePoint | None:
    segments = _segments(body)
    last = -1
    ttl = "5m"
    for i, segment in enumerate(segments):
        if isinstance(segment, dict) and isinstance(segment.get("cache_control"), dict):
            last = i
            ttl = segment["cache_control"].get("ttl") or "5m"
    automatic = body.get("cache_control")
    if isinstance(automatic, dict) and segments:
        last = len(segments) - 1
        ttl = automatic.get("ttl") or "5m"
    if last < 0:
        return None
    prefix = _canonical(segments[: last + 1])
    key = hashlib.blake2b(f"{body['model']}\x00{prefix}".encode(), digest_size=16).digest()
    return CachePoint(key=key, tokens=min(total, tokens_for(len(prefix))), ttl=ttl)


@final
@dataclass(frozen=True, slots=True)
class InputUsage:
    """The input half of ``usage``."""

    input_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


@final
class PromptCache:
    """A bounded LRU of cached prompt prefixes with per-entry expiry.

    Not thread-safe; owned by one app and used from trio tasks, which never interleave
    inside ``usage``.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._expiry: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._expiry)

    def clear(self) -> None:
        self._expiry.clear()

    def usage(self, prompt: Prompt, *, now: float) -> InputUsage:
        """Split ``prompt``'s input tokens into fresh, cache-write and cache-read tokens,
        and record (or refresh) its prefix.

        Args:
          prompt: the analysed request.
          now: a monotonic time in seconds, for expiry.
        """
        point = prompt.cache_point
        if point is None:
            return InputUsage(prompt.input_tokens)
        fresh = prompt.input_tokens - point.tokens
        expires = self._expiry.get(point.key)
        hit = expires is not None and expires > now
        if self._capacity > 0:
            self._expiry[point.key] = now + _TTL_SECONDS.get(point.ttl, 300.0)
            self._expiry.move_to_end(point.key)
            while len(self._expiry) > self._capacity:
                self._expiry.popitem(last=False)
        if hit:
            return InputUsage(fresh, cache_read_input_tokens=point.tokens)
        one_hour = point.ttl == "1h"
        return InputUsage(
            fresh,
            cache_creation_input_tokens=point.tokens,
            ephemeral_5m_input_tokens=0 if one_hour else point.tokens,
            ephemeral_1h_input_tokens=point.tokens if one_hour else 0,
        )
