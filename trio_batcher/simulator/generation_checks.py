"""How the model is asked to generate: ``thinking``, ``output_config`` and sampling.

These fields are where the per-model rules bite (``models.model_capabilities``: manual or
adaptive thinking, effort, ``xhigh``, sampling parameters), so each field's shape is
checked first and the model's rule after it, in the API's own wording. They also constrain
each other: thinking fixes ``temperature`` and ``top_p`` and forbids ``top_k``, and the
``anthropic-version`` 2026-10-21 has no sampling parameters at all. A structured-output
schema is held to the JSON Schema subset (``schema_subset``) where a reply is generated
from it (``/v1/messages``, not ``count_tokens``).

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .betas import THINKING_DISPLAY_UPDATES
from .field_checks import (
    Walk,
    as_integer,
    as_number,
    as_object,
    fail,
    is_set,
    one_of,
    only,
    required,
    tagged,
)
from .models import ModelCapabilities
from .schema_subset import validate_schema_subset

NEW_API_VERSION: Final = "2026-10-21"
SAMPLING_PARAMS: Final = ("temperature", "top_p", "top_k")

MIN_THINKING_BUDGET: Final = 1024
EFFORTS: Final = ("low", "medium", "high", "xhigh", "max")


def check_thinking(
    body: Mapping[str, Any], max_tokens: int | None, caps: ModelCapabilities, walk: Walk
) -> bool:
    """Validate ``thinking``; True when the model will think (enabled or adaptive)."""
    if not is_set(body, "thinking"):
        return False
    thinking, kind = tagged(
        body["thinking"], "thinking", ("enabled", "adaptive", "disabled", "between_tools")
    )
    # thinking-binding-controls beta
    binding = frozenset({"block_binding"}) if walk.any_beta else frozenset()
    if kind == "enabled":
        only(thinking, frozenset({"type", "budget_tokens", "display"}) | binding, "thinking")
        budget = as_integer(
            required(thinking, "budget_tokens", "thinking"), "thinking.budget_tokens"
        )
        if budget < MIN_THINKING_BUDGET:
            fail(
                "thinking.budget_tokens",
                f"Input should be greater than or equal to {MIN_THINKING_BUDGET}",
            )
        if max_tokens is not None and budget >= max_tokens:
            fail(
                "thinking.budget_tokens",
                "`max_tokens` must be greater than `thinking.budget_tokens`",
            )
    elif kind == "adaptive":
        only(thinking, frozenset({"type", "display"}) | binding, "thinking")
    else:
        only(thinking, frozenset({"type"}), "thinking")
    if is_set(thinking, "display"):
        displays: tuple[str, ...] = ("summarized", "omitted")
        if THINKING_DISPLAY_UPDATES in walk.betas:
            displays += ("updates",)
        one_of(thinking["display"], "thinking.display", displays)
    if kind in ("enabled", "disabled") and not caps.manual_thinking:
        fail(
            "",
            f'"thinking.type.{kind}" is not supported for this model. Use '
            '"thinking.type.adaptive" and "output_config.effort" to control thinking behavior.',
        )
    if kind == "adaptive" and not caps.adaptive_thinking:
        fail(
            "",
            '"thinking.type.adaptive" is not supported for this model. Use '
            '"thinking.type.enabled" and "thinking.budget_tokens" to control thinking behavior.',
        )
    return kind in ("enabled", "adaptive")


def check_output_config(
    value: object, caps: ModelCapabilities, walk: Walk, *, grammar: bool
) -> None:
    config = as_object(value, "output_config")
    budget = frozenset({"task_budget"}) if walk.any_beta else frozenset()  # task-budgets beta
    only(config, frozenset({"effort", "format"}) | budget, "output_config")
    if is_set(config, "effort"):
        effort = one_of(config["effort"], "output_config.effort", EFFORTS)
        if not caps.effort:
            fail("output_config.effort", "This model does not support the effort parameter.")
        if effort == "xhigh" and not caps.xhigh_effort:
            fail(
                "output_config.effort",
                "'xhigh' is not supported for this model; use 'low', 'medium', 'high' or 'max'",
            )
    if is_set(config, "format"):
        fmt = as_object(config["format"], "output_config.format")
        only(fmt, frozenset({"type", "schema"}), "output_config.format")
        one_of(
            required(fmt, "type", "output_config.format"),
            "output_config.format.type",
            ("json_schema",),
        )
        schema = as_object(
            required(fmt, "schema", "output_config.format"), "output_config.format.schema"
        )
        if grammar:
            validate_schema_subset(schema, "output_config.format.schema")


def check_sampling(
    body: Mapping[str, Any], *, api_version: str, thinking_on: bool, caps: ModelCapabilities
) -> None:
    if api_version == NEW_API_VERSION:
        for name in SAMPLING_PARAMS:
            if name in body:
                fail(name, f"Extra inputs are not permitted with anthropic-version {api_version}")
        return
    given = [name for name in SAMPLING_PARAMS if is_set(body, name)]
    temperature = (
        as_number(body["temperature"], "temperature", 0, 1) if "temperature" in given else 1
    )
    top_p = as_number(body["top_p"], "top_p", 0, 1) if "top_p" in given else 1
    if "top_k" in given and as_integer(body["top_k"], "top_k") < 0:
        fail("top_k", "Input should be greater than or equal to 0")
    if given and not caps.sampling:
        fail("", f"`{given[0]}` is deprecated for this model.")
    if thinking_on:
        if temperature != 1:
            fail("temperature", "temperature may only be set to 1 when thinking is enabled")
        if top_p < 0.95:
            fail("top_p", "top_p must be between 0.95 and 1 when thinking is enabled")
        if "top_k" in given:
            fail("top_k", "top_k may not be set when thinking is enabled")
    if "temperature" in given and "top_p" in given:
        fail("temperature", "`temperature` and `top_p` cannot both be specified; use only one")
