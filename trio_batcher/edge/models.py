"""The model list ``GET /v1/models`` answers with: the upstream's own, or a bundled one.

OpenAI clients (IDE plugins especially) call ``/v1/models`` to fill a model picker and to
check that a model exists before using it. A list frozen into a release goes stale with the
next model launch, and says nothing about what this key may use, so the catalogue asks the
upstream (Anthropic's ``GET /v1/models``) and keeps the answer for a few minutes; only when
the upstream cannot say does it fall back to the bundled list. Either way the list is
informational: the chat endpoint forwards any model name and lets the upstream decide.

Anthropic lists dated ids (``claude-haiku-4-5-20251001``); clients mostly use the alias
without the date, so each dated id is listed right after its alias, and both are found.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, final

import trio

from ..errors import ProxyError
from ..translation.openai_chat.request import DEFAULT_MODEL_ALIAS

log = logging.getLogger("trio_batcher")

Model = tuple[str, int]  # (id, created: unix time of the model's release)

# The bundled list, newest first: used until the upstream answers, and when it can't.
# Current models only (as of 2026-12): those the Anthropic SDK (2.17) and Claude Code
# (2.1.328, whose default is claude-opus-5-5) name and neither calls retired; Claude Code
# retires claude-sonnet-4-5 on 2026-11-30, and the 4.0/4.1/3.x models before it.
# The 5.5 models' release dates are in neither source: they carry 2026-12-01, the month
# this list was updated, which keeps them first.
KNOWN_MODELS: Final[tuple[Model, ...]] = (
    ("claude-opus-5-5", 1796083200),
    ("claude-sonnet-5-5", 1796083200),
    ("claude-haiku-5-5", 1796083200),
    ("claude-sonnet-5", 1790726400),
    ("claude-opus-5", 1790726400),
    ("claude-opus-4-8", 1781481600),
    ("claude-sonnet-4-6", 1771286400),
    ("claude-opus-4-5", 1764028800),
    ("claude-haiku-4-5", 1760486400),
)

# How long an upstream answer is used, and how soon a failed fetch is tried again.
FRESH_FOR_S: Final = 300.0
RETRY_AFTER_FAILURE_S: Final = 30.0
FETCH_TIMEOUT_S: Final = 10.0

_DATED: Final = re.compile(r"^(.+)-(20\d{6})$")


def model_object(model_id: str, created: int = 0) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "anthropic"}


def from_anthropic(infos: Sequence[Mapping[str, Any]]) -> tuple[Model, ...]:
    """Anthropic's model objects as (id, created), each dated id preceded by its alias."""
    models: list[Model] = []
    seen: set[str] = set()
    for info in infos:
        model_id = info.get("id")
        if not isinstance(model_id, str) or not model_id:
            continue
        created = _unix_time(info.get("created_at"))
        dated = _DATED.match(model_id)
        for name in (dated.group(1), model_id) if dated else (model_id,):
            if name not in seen:
                seen.add(name)
                models.append((name, created))
    return tuple(models)


def list_models(default_model: str, models: Sequence[Model] = KNOWN_MODELS) -> dict[str, Any]:
    """OpenAI's list shape, ``DEFAULT_MODEL`` first (listed even if the upstream did not),
    followed by its own dated ids, as every alias is."""
    created = dict(models)

    def goes_first(mid: str) -> bool:
        dated = _DATED.match(mid)
        return mid == default_model or (dated is not None and dated.group(1) == default_model)

    first = [(mid, when) for mid, when in models if goes_first(mid) and mid != default_model]
    data = [model_object(default_model, created.get(default_model, 0))]
    data += [model_object(mid, when) for mid, when in first]
    data += [model_object(mid, when) for mid, when in models if not goes_first(mid)]
    return {"object": "list", "data": data}


def find_model(
    model_id: str, default_model: str, models: Sequence[Model] = KNOWN_MODELS
) -> dict[str, Any] | None:
    """The model object for ``model_id``: a listed id, ``default``, or -- only when the list
    names no dated id for that alias, as the bundled one doesn't -- a dated form of an alias.
    """
    if model_id == DEFAULT_MODEL_ALIAS:
        found = find_model(default_model, default_model, models)
        return model_object(DEFAULT_MODEL_ALIAS, found["created"] if found else 0)
    listed = list_models(default_model, models)["data"]
    for item in listed:
        if item["id"] == model_id:
            return item  # type: ignore[no-any-return]
    dated = _DATED.match(model_id)
    if dated is None or _DATED.match(alias := dated.group(1)):
        return None
    if any(_DATED.match(item["id"]) and item["id"].startswith(alias + "-") for item in listed):
        return None  # the list has this model's real dated ids, and this is not one of them
    for item in listed:
        if item["id"] == alias:
            return model_object(model_id, item["created"])
    return None


@final
class ModelCatalogue:
    """The upstream's model list, fetched at most once per ``FRESH_FOR_S``.

    Concurrent askers share one fetch. A failed fetch is logged and answered with what the
    catalogue had (the last upstream list, else the bundled one), and not retried for
    ``RETRY_AFTER_FAILURE_S``, so a gateway whose key cannot list models does not ask on
    every picker refresh.

    Args:
      fetch: returns Anthropic's model objects; raises ``ProxyError`` when it cannot.
    """

    def __init__(self, fetch: Callable[[], Awaitable[Sequence[Mapping[str, Any]]]]) -> None:
        self._fetch = fetch
        self._models: tuple[Model, ...] = KNOWN_MODELS
        # The upstream's own model objects by id (aliases: their dated model's), for the
        # Anthropic-shaped list, which relays them with every field the upstream gave.
        self.infos: dict[str, Mapping[str, Any]] = {}
        self._fresh_until = -float("inf")
        self._lock = trio.Lock()
        self.source = "bundled"

    async def models(self) -> tuple[Model, ...]:
        if trio.current_time() < self._fresh_until:
            return self._models
        async with self._lock:
            now = trio.current_time()
            if now < self._fresh_until:
                return self._models
            try:
                with trio.fail_after(FETCH_TIMEOUT_S):
                    fetched = await self._fetch()
                    listed = from_anthropic(fetched)
                if not listed:
                    raise ProxyError(502, "the upstream listed no models")
            except (ProxyError, trio.TooSlowError) as exc:
                reason = exc.message if isinstance(exc, ProxyError) else "timed out"
                log.warning(
                    "listing the upstream's models failed (%s); answering with the %s list",
                    reason,
                    "last upstream" if self.source == "upstream" else "bundled",
                )
                self._fresh_until = now + RETRY_AFTER_FAILURE_S
                return self._models
            self._models = listed
            self.infos = _infos_by_id(fetched)
            self.source = "upstream"
            self._fresh_until = now + FRESH_FOR_S
            return self._models


def _infos_by_id(infos: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    for info in infos:
        model_id = info.get("id")
        if not isinstance(model_id, str) or not model_id:
            continue
        found[model_id] = info
        dated = _DATED.match(model_id)
        if dated is not None:
            found.setdefault(dated.group(1), {**info, "id": dated.group(1)})
    return found


def _unix_time(value: object) -> int:
    if not isinstance(value, str):
        return 0
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0
