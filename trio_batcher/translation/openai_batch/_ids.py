"""Client ``custom_id``s → ids Anthropic accepts, one line at a time, with no map in memory.

Anthropic takes ``^[a-zA-Z0-9_-]{1,64}$``; OpenAI takes any string. An id that already fits
is sent as it is, so the upstream's console stays readable; any other becomes
``r<index>-<12 hex digits of its SHA-256>``: deterministic (the same file maps alike on
every run, and again after a restart) and traceable by hand.

Why it is one-to-one without remembering anything: a generated id carries its line's
index, so no two generated ids are equal; a client id that has the generated form
(``r12-0123456789ab``) is itself mapped, so it can never equal another line's generated
id; and client ids kept as they are are distinct because duplicates are refused first.
So a 100,000-line file is mapped in constant memory; the way back (Anthropic id → line) is
the batch store's ``batch_requests`` table, on disk.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

__all__ = ["ANTHROPIC_CUSTOM_ID", "anthropic_custom_id"]

ANTHROPIC_CUSTOM_ID: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_GENERATED: Final = re.compile(r"r[0-9]+-[0-9a-f]{12}")


def anthropic_custom_id(openai_id: str, index: int) -> str:
    """The id line ``index`` (0-based, among the file's requests) is sent under: the
    client's own when Anthropic accepts it and it cannot be mistaken for a generated one,
    else ``r<index>-<hash>``."""
    if ANTHROPIC_CUSTOM_ID.fullmatch(openai_id) and not _GENERATED.fullmatch(openai_id):
        return openai_id
    digest = hashlib.sha256(openai_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"r{index}-{digest[:12]}"
