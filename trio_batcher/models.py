"""The model list ``GET /v1/models`` answers with.

OpenAI clients (IDE plugins especially) call ``/v1/models`` to fill a model picker and to
check that a model exists before using it, so we list the Claude models the upstream
serves today plus whatever ``DEFAULT_MODEL`` names. The list is informational: the proxy
forwards any model name and lets the upstream decide.
"""

from __future__ import annotations

from typing import Any, Final

# (id, created): created is the model's public release date as a unix timestamp.
KNOWN_MODELS: Final[tuple[tuple[str, int], ...]] = (
    ("claude-opus-4-5", 1764028800),
    ("claude-sonnet-4-5", 1759104000),
    ("claude-haiku-4-5", 1760486400),
    ("claude-opus-4-1", 1754352000),
    ("claude-opus-4", 1747872000),
    ("claude-sonnet-4", 1747872000),
    ("claude-3-7-sonnet-latest", 1740441600),
    ("claude-3-5-haiku-latest", 1729555200),
)


def model_object(model_id: str, created: int = 0) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "anthropic"}


def list_models(default_model: str) -> dict[str, Any]:
    """OpenAI's list shape, the default model first."""
    data = [model_object(default_model, dict(KNOWN_MODELS).get(default_model, 0))]
    data += [model_object(mid, created) for mid, created in KNOWN_MODELS if mid != default_model]
    return {"object": "list", "data": data}


def find_model(model_id: str, default_model: str) -> dict[str, Any] | None:
    for item in list_models(default_model)["data"]:
        if item["id"] == model_id:
            return item  # type: ignore[no-any-return]
    return None
