"""The model catalogue the simulator lists at ``GET /v1/models``, and what each model accepts.

Replies do not depend on the model, and any ``claude-*`` id is served (a simulator should
not need updating for each release); this list makes ``/v1/models`` look like Anthropic's,
newest first, and gives the output limit ``max_tokens`` is checked against.

``model_capabilities`` derives the per-model request rules from the id's family and version
rather than from the catalogue, so a future id (``claude-opus-4-9``, ``claude-sonnet-5-1``)
gets the rules of its generation. Ids it cannot read (old-style ``claude-3-7-sonnet-latest``,
``claude-next``) get ``PERMISSIVE``: the simulator never rejects what it cannot place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, final

# The output limit for a claude-* id the catalogue does not know.
DEFAULT_MAX_OUTPUT_TOKENS: Final = 128_000

# (id, display name, created_at, lifecycle, max input tokens, max output tokens)
CATALOGUE: Final[tuple[tuple[str, str, str, str, int, int], ...]] = (
    ("claude-opus-5-5", "Claude Opus 5.5", "2026-12-01T00:00:00Z", "active", 1_000_000, 128_000),
    (
        "claude-sonnet-5-5",
        "Claude Sonnet 5.5",
        "2026-12-01T00:00:00Z",
        "active",
        1_000_000,
        128_000,
    ),
    ("claude-haiku-5-5", "Claude Haiku 5.5", "2026-12-01T00:00:00Z", "active", 1_000_000, 128_000),
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


@final
@dataclass(frozen=True, slots=True)
class ModelCapabilities:
    """Request features a model accepts, where models differ (True: accepted).

    Attributes:
      prefill: a conversation may end with an assistant turn.
      manual_thinking: ``thinking.type`` ``enabled`` (with ``budget_tokens``) and ``disabled``.
      adaptive_thinking: ``thinking.type`` ``adaptive``.
      effort: ``output_config.effort``.
      xhigh_effort: ``output_config.effort`` ``xhigh`` (when ``effort`` is accepted).
      sampling: ``temperature``, ``top_p`` and ``top_k``.
      system_messages: ``role: "system"`` messages inside ``messages`` (mid-conversation
        system messages; "available on Claude Opus 4.8 only" when introduced, and sent by
        Claude Code to every generation-5 model).
    """

    prefill: bool = True
    manual_thinking: bool = True
    adaptive_thinking: bool = True
    effort: bool = True
    xhigh_effort: bool = True
    sampling: bool = True
    system_messages: bool = True


PERMISSIVE: Final = ModelCapabilities()
"""For ids ``model_capabilities`` cannot place: nothing model-specific is rejected."""

# claude-<family>-<major>[-<minor>][-YYYYMMDD]; an 8-digit part is a date, never a minor.
_MODEL_ID: Final = re.compile(r"^claude-(opus|sonnet|haiku)-(\d{1,2})(?:-(\d{1,2}))?(?:-\d{8})?$")


def model_version(model_id: str) -> tuple[str, int, int] | None:
    """``(family, major, minor)`` of a current-style id, or None.

    ``claude-opus-4-5-20251101`` -> ``("opus", 4, 5)``; ``claude-sonnet-4-20250514`` ->
    ``("sonnet", 4, 0)``; ``claude-3-7-sonnet-latest`` -> None.
    """
    match = _MODEL_ID.match(model_id)
    if match is None:
        return None
    family, major, minor = match.groups()
    return family, int(major), int(minor or 0)


def model_capabilities(model_id: str) -> ModelCapabilities:
    """What ``model_id`` accepts, by family and version.

    ====================  =======  ========  ========  ======  =====  ========  ======
    model                 prefill  enabled/  adaptive  effort  xhigh  sampling  system
                                   disabled                                     messages
    ====================  =======  ========  ========  ======  =====  ========  ======
    4.0 - 4.5 (not Opus)  yes      yes       no        no      no     yes       no
    Opus 4.5              yes      yes       no        yes     no     yes       no
    4.6 (any family)      no       yes       yes       yes     no     yes       no
    Opus 4.7              no       no        yes       yes     yes    no        no
    Opus 4.8 and later    no       no        yes       yes     yes    no        yes
    Sonnet/Haiku 4.7+     no       yes       yes       yes     no     yes       no
    generation 5 and on   no       no        yes       yes     yes    no        yes
    ====================  =======  ========  ========  ======  =====  ========  ======
    """
    version = model_version(model_id)
    if version is None:
        return PERMISSIVE
    family, major, minor = version
    since_4_6 = (major, minor) >= (4, 6)
    adaptive_only = major >= 5 or (family == "opus" and (major, minor) >= (4, 7))
    return ModelCapabilities(
        prefill=not since_4_6,
        manual_thinking=not adaptive_only,
        adaptive_thinking=since_4_6,
        effort=since_4_6 or (family == "opus" and (major, minor) >= (4, 5)),
        xhigh_effort=adaptive_only,
        sampling=not adaptive_only,
        system_messages=major >= 5 or (family == "opus" and (major, minor) >= (4, 8)),
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
