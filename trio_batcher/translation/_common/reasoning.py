"""A reasoning effort (Chat's ``reasoning_effort``, Responses' ``reasoning.effort``) →
extended thinking, and the ``max_tokens`` that goes with it.

Thinking is where Anthropic's cross-field rules meet (budget below ``max_tokens``, no forced
tool, a thinking block leading the last assistant turn), so each is resolved here, in favour
of the client's explicit choices, with the effort's parameter named as ignored when it loses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...errors import invalid_request
from .fields import Ignored
from .model_traits import ModelTraits

# reasoning_effort → thinking budget_tokens. "none"/"minimal" → no thinking block at all.
THINKING_BUDGETS: Final[Mapping[str, int]] = {
    "low": 1024,
    "medium": 4096,
    "high": 16384,
    "xhigh": 32768,
    "max": 49152,
}
_NO_THINKING: Final = ("none", "minimal")
MIN_THINKING_BUDGET: Final = 1024


def thinking_for(
    effort: object,
    param: str,
    body: dict[str, Any],
    cap: int | None,
    traits: ModelTraits,
    default_max_tokens: int,
    ignored: Ignored,
) -> dict[str, Any] | None:
    """Extended thinking for ``effort`` (the client's field ``param``), and the
    ``max_tokens`` that goes with it.

    Models that think adaptively (``model_traits``) get ``{type: adaptive}`` with the effort
    as ``output_config.effort`` (an effort the model lacks becomes the nearest one below:
    ``xhigh`` → ``max`` → ``high``), and ``max_tokens`` as below; older models get a fixed
    budget. OpenAI's ``max_completion_tokens`` includes reasoning tokens, exactly like Anthropic's
    ``max_tokens``, so a client's cap is kept and the budget shrinks to fit under it
    (``budget < max_tokens`` is Anthropic's rule); below the 1024-token minimum there is no
    room to think and thinking is left off. Without a client cap the budget comes on top of
    ``default_max_tokens``. Thinking is also left off — and ``param`` listed as
    ignored — when the request forces a tool (Anthropic forbids both), or when the last
    assistant turn (a prefill, or the turn whose tool results are being returned) does not
    start with a thinking block, which Anthropic requires once thinking is on.
    """
    if effort is None:
        return None
    if effort in _NO_THINKING:  # a tuple: membership never hashes the value
        return None
    if not isinstance(effort, str) or effort not in THINKING_BUDGETS:
        raise invalid_request(
            f"{param} must be one of {', '.join((*_NO_THINKING, *THINKING_BUDGETS))}.",
            param=param,
        )
    budget = THINKING_BUDGETS[effort]
    if cap is not None and not traits.adaptive_thinking:
        budget = min(budget, cap - 1)
    forced_tool = body.get("tool_choice", {}).get("type") in ("any", "tool")
    if budget < MIN_THINKING_BUDGET or forced_tool or not _can_think(body["messages"]):
        ignored.add(param)
        return None
    # Without a client cap, the budget is headroom on top of the default, adaptive or not.
    body["max_tokens"] = cap if cap is not None else default_max_tokens + budget
    if traits.adaptive_thinking:
        body.setdefault("output_config", {})["effort"] = _effort(effort, traits)
        return {"type": "adaptive"}
    return {"type": "enabled", "budget_tokens": budget}


def _effort(effort: str, traits: ModelTraits) -> str:
    """The client's effort as an ``output_config.effort`` the model has."""
    for candidate in (effort, *_EFFORTS_BELOW.get(effort, ())):
        if candidate in traits.efforts:
            return candidate
    return "high"


_EFFORTS_BELOW: Final[Mapping[str, tuple[str, ...]]] = {"xhigh": ("max", "high"), "max": ("high",)}


def _can_think(messages: list[dict[str, Any]]) -> bool:
    last_assistant = None
    if messages[-1]["role"] == "assistant":
        last_assistant = messages[-1]
    elif len(messages) >= 2 and any(b["type"] == "tool_result" for b in messages[-1]["content"]):
        last_assistant = messages[-2]
    if last_assistant is None:
        return True
    return last_assistant["content"][0]["type"] in ("thinking", "redacted_thinking")
