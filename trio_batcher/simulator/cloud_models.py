"""The clouds' names for Claude models, mapped to the Anthropic ids the simulator's rules use.

Bedrock names a model ``anthropic.claude-sonnet-4-5-20250929-v1:0``, or through a
cross-region inference profile ``us.anthropic.claude-...`` (``global.``, ``eu.``, ``apac.``,
...), or by the ARN of either; Vertex AI names it ``claude-sonnet-4-5@20250929``. Mapping them
to ``claude-sonnet-4-5-20250929`` lets the same validation, model limits, replies and tool
use apply on every surface. ``None`` means the cloud does not know the name.
"""

from __future__ import annotations

import re
from typing import Final

_BEDROCK: Final = re.compile(
    r"(?:(?:us|eu|apac|global|jp|au|ca|us-gov)\.)?anthropic\.(claude-[a-z0-9.-]+?)"
    r"(?:-v\d+(?::\d+)?)?"
)
_VERTEX: Final = re.compile(r"(claude-[a-z0-9.-]+?)(?:@(\d{8}|latest))?")


def bedrock_model(model_id: str) -> str | None:
    """The Anthropic id for a Bedrock model id, inference profile or ARN of either."""
    if model_id.startswith("arn:"):
        model_id = model_id.rpartition("/")[2]
    match = _BEDROCK.fullmatch(model_id)
    return match.group(1) if match else None


def vertex_model(model: str) -> str | None:
    """The Anthropic id for a Vertex AI publisher model (``name@version``)."""
    match = _VERTEX.fullmatch(model)
    if match is None:
        return None
    name, version = match.groups()
    return f"{name}-{version}" if version and version != "latest" else name
