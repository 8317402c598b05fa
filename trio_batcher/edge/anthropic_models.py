"""``GET /v1/models`` in Anthropic's shape, for clients that send ``anthropic-version``.

The same catalogue as the OpenAI list (``models.py``: the upstream's own list, or the
bundled one), spelled as Anthropic spells it -- ``{"data": [{"type": "model", "id",
"display_name", "created_at"}], "has_more", "first_id", "last_id"}`` -- and paged the same
way (``limit``, ``after_id``, ``before_id``). Claude Code's gateway model discovery reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from ..errors import ProxyError

__all__ = ["anthropic_model", "anthropic_model_list", "display_name"]

_DEFAULT_LIMIT: Final = 20
_MAX_LIMIT: Final = 1000
_DATE: Final = re.compile(r"-(20\d{6})$")


def display_name(model_id: str) -> str:
    """A readable name for an id: ``claude-sonnet-4-5-20250929`` → ``Claude Sonnet 4.5``."""
    words: list[str] = []
    version: list[str] = []
    for part in _DATE.sub("", model_id).split("-"):
        if part.isdigit():
            version.append(part)
            continue
        if version:
            words.append(".".join(version))
            version = []
        words.append(part.capitalize() if part != "latest" else "(latest)")
    if version:
        words.append(".".join(version))
    return " ".join(words)


def anthropic_model(
    item: Mapping[str, Any], infos: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """An OpenAI model object (``id``, ``created``) as Anthropic's ``ModelInfo``: the
    upstream's own object when it listed this id (every field kept), else one made from
    the id (an active model; nothing is guessed beyond its name and date)."""
    info = (infos or {}).get(str(item["id"]))
    if info is not None:
        return {**info, "id": item["id"]}
    created = item.get("created") or 0
    return {
        "type": "model",
        "id": item["id"],
        "display_name": display_name(str(item["id"])),
        "created_at": datetime.fromtimestamp(int(created), UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lifecycle": "active",
        "deprecated_at": None,
        "retires_at": None,
    }


def anthropic_model_list(
    items: Sequence[Mapping[str, Any]],
    query: Mapping[str, str],
    infos: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """One page of the list; a 400 for a ``limit`` outside 1-1000."""
    raw_limit = query.get("limit")
    try:
        limit = _DEFAULT_LIMIT if raw_limit is None else int(raw_limit)
    except ValueError:
        limit = 0
    if not 1 <= limit <= _MAX_LIMIT:
        raise ProxyError(
            400, f"limit: must be an integer from 1 to {_MAX_LIMIT}", type="invalid_request_error"
        )
    ids = [str(item["id"]) for item in items]
    start, stop = 0, len(items)
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None:
        start = ids.index(after) + 1 if after in ids else len(ids)
    if before is not None:
        stop = ids.index(before) if before in ids else 0
        start = max(start, stop - limit) if after is None else start
    page = [anthropic_model(item, infos) for item in items[start:stop][:limit]]
    has_more = (start + len(page) < stop) if before is None else start > 0
    return {
        "data": page,
        "has_more": has_more,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }
