"""Client ``custom_id``s ⇄ ids Anthropic accepts, and the map between them.

Anthropic takes ``^[a-zA-Z0-9_-]{1,64}$``; OpenAI takes any string. An id that already fits
is sent as it is, so the upstream's console stays readable; any other becomes
``r<index>-<12 hex digits of its SHA-256>``: deterministic (the same file maps alike on
every run), unique within a file because the line index is, and traceable by hand.

An id that fits may still equal one generated for another line (a client could name a line
``r3-…``); ``IdMap`` settles that, first come first served in file order, by mapping the
later line too, so no two lines ever share an Anthropic id. The caller keeps the map with
the batch (``dump_lines`` / ``load_lines``, one JSON object a line) to map results back.
Its memory is two dict entries a line (ids are at most ``MAX_CUSTOM_ID_CHARS``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from typing import Final, final

__all__ = ["ANTHROPIC_CUSTOM_ID", "IdMap", "anthropic_custom_id"]

ANTHROPIC_CUSTOM_ID: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _hashed(openai_id: str, index: int) -> str:
    digest = hashlib.sha256(openai_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"r{index}-{digest[:12]}"


def anthropic_custom_id(openai_id: str, index: int) -> str:
    """The id line ``index`` (0-based) is sent under, before collisions are settled: the
    client's own when Anthropic accepts it, else ``r<index>-<hash>``."""
    if ANTHROPIC_CUSTOM_ID.fullmatch(openai_id):
        return openai_id
    return _hashed(openai_id, index)


@final
class IdMap:
    """Both directions, plus each line's index (results come back in no order)."""

    def __init__(self) -> None:
        self._to_anthropic: dict[str, str] = {}
        self._to_openai: dict[str, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self._to_anthropic)

    def add(self, openai_id: str, index: int) -> str:
        """Map line ``index``'s id; returns the Anthropic id, unique within this map.

        Raises:
          ValueError: ``openai_id`` is mapped already (duplicates are refused earlier).
        """
        if openai_id in self._to_anthropic:
            raise ValueError(f"custom_id {openai_id!r} is mapped already")
        candidate = anthropic_custom_id(openai_id, index)
        if candidate in self._to_openai:
            candidate = _hashed(openai_id, index)
            n = 0
            while candidate in self._to_openai:  # only a client's own id can be here
                n += 1
                candidate = f"{_hashed(openai_id, index)}-{n}"
        self._put(openai_id, candidate, index)
        return candidate

    def _put(self, openai_id: str, anthropic_id: str, index: int) -> None:
        self._to_anthropic[openai_id] = anthropic_id
        self._to_openai[anthropic_id] = (openai_id, index)

    def anthropic(self, openai_id: str) -> str:
        """The Anthropic id of a client id (KeyError if unknown)."""
        return self._to_anthropic[openai_id]

    def openai(self, anthropic_id: str) -> str:
        """The client id behind an Anthropic id (KeyError if unknown)."""
        return self._to_openai[anthropic_id][0]

    def index(self, anthropic_id: str) -> int:
        """The input line index (0-based) of an Anthropic id, to put results in file order."""
        return self._to_openai[anthropic_id][1]

    def dump_lines(self) -> Iterator[bytes]:
        """``{"i": index, "openai": id, "anthropic": id}\\n`` for each line, in insertion order."""
        for anthropic_id, (openai_id, index) in self._to_openai.items():
            entry = {"i": index, "openai": openai_id, "anthropic": anthropic_id}
            yield json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def load_lines(cls, lines: Iterable[bytes | str]) -> IdMap:
        """The map ``dump_lines`` wrote (empty lines skipped).

        Raises:
          ValueError: a line is not such an entry, or repeats an id.
        """
        out = cls()
        for line in lines:
            if not line.strip():
                continue
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("an id map line must be a JSON object")
            index, openai_id, anthropic_id = (
                entry.get("i"),
                entry.get("openai"),
                entry.get("anthropic"),
            )
            if not (
                isinstance(index, int)
                and isinstance(openai_id, str)
                and isinstance(anthropic_id, str)
                and ANTHROPIC_CUSTOM_ID.fullmatch(anthropic_id)
            ):
                raise ValueError(f"not an id map entry: {entry!r}")
            if openai_id in out._to_anthropic or anthropic_id in out._to_openai:
                raise ValueError(f"id map entry repeats an id: {entry!r}")
            out._put(openai_id, anthropic_id, index)
        return out
