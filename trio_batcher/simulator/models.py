"""The model catalogue the simulator lists at ``GET /v1/models``.

Replies do not depend on the model, and any ``claude-*`` id is served (a simulator should
not need updating for each release); this list makes ``/v1/models`` look like Anthropic's,
newest first, and gives the output limit ``max_tokens`` is checked against.
"""

from __future__ import annotations

from typing import Any, Final

# The output limit for a claude-* id the catalogue does not know.
DEFAULT_MAX_OUTPUT_TOKENS: Final = 128_000

# (id, display name, created_at, lifecycle, max input tokens, max output tokens)
CATALOGUE: Final[tuple[tuple[str, str, str, str, int, int], ...]] = (
    ("claude-sonnet-5", "Claude Sonnet 5", "2026-09-30T00:00:00Z", "active", 1_000_000, 128_000),
    ("claude-opus-5", "Claude Opus 5", "2026-09-30T00:00:00Z", "active", 1_000_000, 128_000),
    ("claude-opus-4-8", "Claude Opus 4.8", "2026-06-15T00:00:00Z", "active", 1_000_000, 128_000),
    ("claude-sonnet-4-6", "Claude Sonnet 4.6", "2026-02-17T00:00:00Z", "active", 1_000_000, 64_000),
    (
        "claude-opus-4-5-20251101",
        "Claude Opus 4.5",
        "2025-11-24T00:00:00Z",
        "deprecated",
        200_000,
        64_000,
    ),
    (
        "claude-haiku-4-5-20251001",
        "Claude Haiku 4.5",
        "2025-10-15T00:00:00Z",
        "active",
        200_000,
        64_000,
    ),
    (
        "claude-sonnet-4-5-20250929",
        "Claude Sonnet 4.5",
        "2025-09-29T00:00:00Z",
        "deprecated",
        1_000_000,
        64_000,
    ),
)


def model_info(entry: tuple[str, str, str, str, int, int]) -> dict[str, Any]:
    model_id, name, created, lifecycle, max_input, max_output = entry
    return {
        "type": "model",
        "id": model_id,
        "display_name": name,
        "created_at": created,
        "lifecycle": lifecycle,
        "max_input_tokens": max_input,
        "max_tokens": max_output,
    }


def find_model(model_id: str) -> dict[str, Any] | None:
    """The catalogue entry for ``model_id``; aliases without a date match too."""
    for entry in CATALOGUE:
        if model_id == entry[0] or entry[0].startswith(model_id + "-2"):
            return model_info(entry)
    return None


def list_models(
    *, limit: int = 20, after_id: str | None = None, before_id: str | None = None
) -> dict[str, Any]:
    """A page of ``GET /v1/models`` in Anthropic's list shape."""
    ids = [entry[0] for entry in CATALOGUE]
    start, stop = 0, len(ids)
    if after_id in ids:
        start = ids.index(after_id) + 1
    if before_id in ids:
        stop = ids.index(before_id)
        start = max(start, stop - limit)
    page = [model_info(e) for e in CATALOGUE[start:stop][:limit]]
    return {
        "data": page,
        "has_more": start + len(page) < stop,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }
