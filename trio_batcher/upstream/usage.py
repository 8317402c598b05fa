"""Anthropic's ``usage`` object as a stream reports it, piece by piece.

``message_start`` carries the input side (uncached input, cache writes and reads) and a
first output count; each ``message_delta`` carries the cumulative output. A later report of
a field replaces an earlier one. Whoever needs a stream's usage -- the pipeline for the
observatory, the OpenAI codec for ``include_usage`` -- merges reports the same way, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["USAGE_FIELDS", "merge_usage"]

USAGE_FIELDS: Final = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
    "output_tokens_details",
    "cache_creation",
    "server_tool_use",
    "service_tier",
)
"""The usage fields kept, as the upstream names them."""


def merge_usage(into: dict[str, Any], usage: object) -> None:
    """Fold one usage report into ``into``; anything but a mapping is ignored."""
    if not isinstance(usage, Mapping):
        return
    for key in USAGE_FIELDS:
        if usage.get(key) is not None:
            into[key] = usage[key]
