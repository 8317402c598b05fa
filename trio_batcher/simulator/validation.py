"""Request validation as strict as Anthropic's Messages API -- and no stricter.

Theory of operation: the real API is a pydantic model with ``extra="forbid"`` everywhere
plus a few cross-field rules (tool_use/tool_result pairing, thinking budget, sampling
parameters per API version, where ``role: "system"`` messages may stand) plus per-model
rules (``models.model_capabilities``: prefill, thinking types, effort, sampling
parameters, system messages) and the JSON Schema subset that structured outputs and strict
tools compile (``schema_subset``). Betas named in ``anthropic-beta`` switch to the beta
API's larger model (``betas.py`` says which field needs which). This module mirrors these
layers as plain functions over the decoded JSON, so property tests elsewhere can call
``validate_messages_request`` directly to prove that translated requests are valid. A
field's shape is checked before the model's rules about it, as pydantic would.

This module is the face: the entry points, the top-level fields and the order in which
every part is checked. The parts live in modules of their own, all speaking through
``field_checks`` (pydantic's wording, dotted paths): ``tool_checks`` (``tools``,
``tool_choice``), ``conversation_checks`` (``system``, ``messages``, the rules across
turns), ``block_checks`` (each content block), ``generation_checks`` (``thinking``,
``output_config``, sampling parameters) and ``beta_checks`` (the beta API's fields).

Guarantees, in order of importance:

1. Never reject a request the real API accepts. Where the API's behaviour is unknown, we
   accept (for example a leading assistant turn, images in assistant turns, ``null`` for an
   optional field, a model id the capability table cannot place). ``count_tokens`` is held
   to the request's shape only, not to the model's rules or the schema subset: whether the
   real endpoint applies them is not documented.
2. Reject what the real API is documented to reject, with a message that starts with the
   dotted path of the offending field (``messages.1.content.0.text: ...``), like the API.
   The per-model rules keep the API's own wording, which names the field inside the text
   (``"thinking.type.enabled" is not supported for this model...``).

The tables of allowed keys mirror the installed ``anthropic`` SDK's request TypedDicts, the
beta ones for the ``*_BETA_KEYS`` tables (the test suite compares them), so a field the SDK
can send is never "extra" here.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .beta_checks import (
    CONTEXT_EDIT_KEYS,
    COUNT_TOKENS_BETA_KEYS,
    MCP_SERVER_KEYS,
    MESSAGES_BETA_KEYS,
    check_context_management,
    check_mcp_servers,
    unlocked_beta_keys,
)
from .block_checks import BLOCK_KEYS, IMAGE_MEDIA_TYPES, TOOL_USE_ID
from .config import API_VERSIONS
from .conversation_checks import MAX_MESSAGES, check_messages, check_system
from .errors import SimulatorInvalidRequest
from .field_checks import (
    Walk,
    as_boolean,
    as_integer,
    as_list,
    as_object,
    as_string,
    check_cache_control,
    fail,
    is_set,
    one_of,
    only,
    required,
)
from .generation_checks import (
    EFFORTS,
    MIN_THINKING_BUDGET,
    NEW_API_VERSION,
    SAMPLING_PARAMS,
    check_output_config,
    check_sampling,
    check_thinking,
)
from .models import PERMISSIVE, model_capabilities
from .tool_checks import CUSTOM_TOOL_KEYS, TOOL_NAME, check_tool_choice, check_tools

__all__ = [
    "BLOCK_KEYS",
    "CONTEXT_EDIT_KEYS",
    "COUNT_TOKENS_BETA_KEYS",
    "COUNT_TOKENS_KEYS",
    "CUSTOM_TOOL_KEYS",
    "EFFORTS",
    "IMAGE_MEDIA_TYPES",
    "MAX_CACHE_BREAKPOINTS",
    "MAX_MESSAGES",
    "MCP_SERVER_KEYS",
    "MESSAGES_BETA_KEYS",
    "MESSAGES_KEYS",
    "MIN_THINKING_BUDGET",
    "NEW_API_VERSION",
    "PREFILL_UNSUPPORTED",
    "SAMPLING_PARAMS",
    "TOOL_NAME",
    "TOOL_USE_ID",
    "SimulatorInvalidRequest",
    "validate_count_tokens_request",
    "validate_messages_request",
]

MESSAGES_KEYS: Final = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "cache_control",
        "container",
        "diagnostics",
        "inference_geo",
        "metadata",
        "output_config",
        "service_tier",
        "speed",
        "stop_sequences",
        "stream",
        "system",
        "thinking",
        "tool_choice",
        "tools",
        *SAMPLING_PARAMS,
    }
)
"""Top-level fields of ``POST /v1/messages`` (sampling parameters: version 2023-06-01 only)."""

COUNT_TOKENS_KEYS: Final = frozenset(
    {
        "model",
        "messages",
        "cache_control",
        "output_config",
        "speed",
        "system",
        "thinking",
        "tool_choice",
        "tools",
    }
)
"""Top-level fields of ``POST /v1/messages/count_tokens``."""

MAX_CACHE_BREAKPOINTS: Final = 4

PREFILL_UNSUPPORTED: Final = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)


def validate_messages_request(
    body: object, *, api_version: str, betas: Iterable[str] = frozenset()
) -> None:
    """Check a ``POST /v1/messages`` body the way the real API does.

    Args:
      body: the decoded JSON body.
      api_version: the ``anthropic-version`` header value.
      betas: the beta names of the ``anthropic-beta`` header (``betas.parse_betas``); they
        unlock the beta API's fields (see ``betas.py``).

    Raises:
      SimulatorInvalidRequest: the first problem found; the message names the field.
    """
    _validate(
        body,
        api_version=api_version,
        allowed=MESSAGES_KEYS,
        beta_keys=MESSAGES_BETA_KEYS,
        betas=betas,
        count_tokens=False,
    )


def validate_count_tokens_request(
    body: object, *, api_version: str, betas: Iterable[str] = frozenset()
) -> None:
    """Like ``validate_messages_request`` for ``POST /v1/messages/count_tokens``."""
    _validate(
        body,
        api_version=api_version,
        allowed=COUNT_TOKENS_KEYS,
        beta_keys=COUNT_TOKENS_BETA_KEYS,
        betas=betas,
        count_tokens=True,
    )


def _validate(
    body: object,
    *,
    api_version: str,
    allowed: frozenset[str],
    beta_keys: frozenset[str],
    betas: Iterable[str],
    count_tokens: bool,
) -> None:
    """The whole request, part by part in the API's order; the first problem is raised."""
    if api_version not in API_VERSIONS:
        fail("anthropic-version", f"{api_version!r} is not a supported API version")
    if not isinstance(body, dict):
        fail("body", "Input should be a JSON object")
    walk = Walk(betas)
    only(body, allowed | unlocked_beta_keys(beta_keys, walk), "")

    model = as_string(required(body, "model", ""), "model", non_empty=True)
    # count_tokens: shape only (see the module docstring).
    caps = PERMISSIVE if count_tokens else model_capabilities(model)
    grammar = not count_tokens  # check the schemas that generation compiles to a grammar
    max_tokens: int | None = None
    if not count_tokens:
        max_tokens = as_integer(required(body, "max_tokens", ""), "max_tokens")
        if max_tokens < 0:  # 0 is valid: it pre-warms the prompt cache without a reply
            fail("max_tokens", "Input should be greater than or equal to 0")

    tool_names = check_tools(body, walk, grammar=grammar)
    if is_set(body, "system"):
        check_system(body["system"], walk)
    check_messages(required(body, "messages", ""), walk, caps)
    if walk.breakpoints > MAX_CACHE_BREAKPOINTS:
        fail(
            "",
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {walk.breakpoints}.",
        )
    if not caps.prefill and body["messages"][-1]["role"] == "assistant":
        fail("", PREFILL_UNSUPPORTED)

    forced_tool = check_tool_choice(body, tool_names)
    thinking_on = check_thinking(body, max_tokens, caps, walk)
    if thinking_on and forced_tool:
        fail("tool_choice", "Thinking may not be enabled when tool_choice forces tool use.")
    check_sampling(body, api_version=api_version, thinking_on=thinking_on, caps=caps)

    if is_set(body, "stop_sequences"):
        for i, seq in enumerate(as_list(body["stop_sequences"], "stop_sequences")):
            text = as_string(seq, f"stop_sequences.{i}")
            if not text:
                fail("stop_sequences", "each stop sequence must be non-empty")
            if not text.strip():
                fail("stop_sequences", "each stop sequence must contain non-whitespace")
    if "stream" in body:
        as_boolean(body["stream"], "stream")
    if is_set(body, "metadata"):
        metadata = as_object(body["metadata"], "metadata")
        only(metadata, frozenset({"user_id"}), "metadata")
        if is_set(metadata, "user_id"):
            as_string(metadata["user_id"], "metadata.user_id")
    if is_set(body, "output_config"):
        check_output_config(body["output_config"], caps, walk, grammar=grammar)
    if is_set(body, "service_tier"):
        one_of(body["service_tier"], "service_tier", ("auto", "standard_only"))
    if is_set(body, "speed"):
        one_of(body["speed"], "speed", ("standard", "fast"))
    if is_set(body, "inference_geo"):
        as_string(body["inference_geo"], "inference_geo")
    if is_set(body, "cache_control"):
        check_cache_control(body["cache_control"], "cache_control")
    if is_set(body, "container") and not isinstance(body["container"], str | dict):
        fail("container", "Input should be a string or an object")
    if is_set(body, "diagnostics"):
        as_object(body["diagnostics"], "diagnostics")
    if is_set(body, "context_management"):
        if is_set(body, "compaction"):
            fail("compaction", "compaction cannot be combined with context_management")
        check_context_management(body["context_management"])
    if is_set(body, "mcp_servers"):
        check_mcp_servers(body["mcp_servers"])
