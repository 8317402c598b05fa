"""What a Claude model accepts, read off its id: the request shapes newer models refuse.

OpenAI clients send the same request to every model; Anthropic's newer models turned some
long-standing shapes into 400s. The translation asks here instead of hard-coding model
names, so an id it has never seen (``claude-opus-4-9``, ``claude-sonnet-5-1``) gets the
rules of its generation:

- from 4.6 on, a conversation may not end with an assistant turn (no prefill);
- Opus and Sonnet from 4.6 on think *adaptively* (``thinking: {type: adaptive}`` with
  ``output_config.effort``); Opus from 4.7 on and every model from generation 5 on accept
  nothing else, while older models only know a fixed ``budget_tokens``;
- Opus from 4.7 on and every model from generation 5 on refuse ``temperature``, ``top_p``
  and ``top_k``;
- ``effort`` ``xhigh`` exists from Opus 4.7 and generation 5 on, ``max`` on Opus and
  generation 5.

An id that does not parse as a Claude model (another gateway's alias, a fine-tune name) is
sent as the client wrote it, with the classic rules: the upstream is the judge then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, final

__all__ = ["CLASSIC", "ModelTraits", "traits_for"]

# claude-opus-4-8, claude-sonnet-4-5-20250929, claude-opus-4-20250514, claude-sonnet-5
_CURRENT: Final = re.compile(r"^claude-([a-z]+)-(\d+)(?:-(\d{1,2}))?(?:-\d{8}|-latest)?$")


@final
@dataclass(frozen=True)
class ModelTraits:
    """The request shapes a model takes. Defaults: a model that predates every change."""

    prefill: bool = True
    adaptive_thinking: bool = False  # think with {type: adaptive} + output_config.effort
    sampling: bool = True  # temperature, top_p, top_k
    efforts: frozenset[str] = frozenset()  # output_config.effort values, when adaptive


CLASSIC: Final = ModelTraits()
_EFFORTS: Final = frozenset({"low", "medium", "high"})


@lru_cache(maxsize=256)
def traits_for(model: str) -> ModelTraits:
    match = _CURRENT.match(model)
    if match is None:
        return CLASSIC
    family = match.group(1)
    version = (int(match.group(2)), int(match.group(3) or 0))
    if version < (4, 6):
        return CLASSIC
    newest = version >= (5, 0) or (family == "opus" and version >= (4, 7))
    adaptive = newest or family in ("opus", "sonnet")
    efforts = _EFFORTS
    if newest:
        efforts |= {"xhigh"}
    if newest or family == "opus":
        efforts |= {"max"}
    return ModelTraits(
        prefill=False,
        adaptive_thinking=adaptive,
        sampling=not newest,
        efforts=efforts if adaptive else frozenset(),
    )
