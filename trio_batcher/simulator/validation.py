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

Mid-conversation system messages (``role: "system"`` inside ``messages``) need no beta
("available on Claude Opus 4.8 only. No beta header is required", and Claude Code sends
them to every generation-5 model); older models refuse the role unless the preview beta
``mid-conversation-system-2026-04-07`` is named. Where one may stand is documented: never
first, right after a user message (or an assistant message ending in server tool use),
and last or before an assistant message.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, NoReturn

from .betas import BETA_FIELDS, MID_CONVERSATION_SYSTEM, THINKING_DISPLAY_UPDATES, beta_families
from .config import API_VERSIONS
from .errors import SimulatorInvalidRequest
from .models import PERMISSIVE, ModelCapabilities, model_capabilities
from .schema_subset import validate_schema_subset

__all__ = [
    "BLOCK_KEYS",
    "COUNT_TOKENS_BETA_KEYS",
    "COUNT_TOKENS_KEYS",
    "MESSAGES_BETA_KEYS",
    "MESSAGES_KEYS",
    "SimulatorInvalidRequest",
    "validate_count_tokens_request",
    "validate_messages_request",
]

NEW_API_VERSION: Final = "2026-10-21"
SAMPLING_PARAMS: Final = ("temperature", "top_p", "top_k")

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

MESSAGES_BETA_KEYS: Final = frozenset(
    {
        "billing_policy",
        "compaction",
        "context_management",
        "fallback_credit_token",
        "fallbacks",
        "mcp_servers",
        "thread",
        "safeguards",  # Claude Code's, under its dangerous-tool-use beta; in no SDK
    }
)
"""Top-level fields only the beta API has: the documented ones need their beta
(``betas.BETA_FIELDS``), the others any beta; their values are not checked beyond that,
except ``context_management`` and ``mcp_servers``."""

COUNT_TOKENS_BETA_KEYS: Final = frozenset(
    {"billing_policy", "compaction", "context_management", "mcp_servers"}
)
"""Like ``MESSAGES_BETA_KEYS`` for ``count_tokens``."""

CONTEXT_EDIT_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "clear_tool_uses_20250919": frozenset(
        {"type", "clear_at_least", "clear_tool_inputs", "exclude_tools", "keep", "trigger"}
    ),
    "clear_thinking_20251015": frozenset({"type", "keep"}),
    "compact_20260112": frozenset({"type", "instructions", "pause_after_compaction", "trigger"}),
}
"""The ``context_management.edits`` the beta API knows, and their fields."""

MCP_SERVER_KEYS: Final = frozenset(
    {"name", "type", "url", "authorization_token", "tool_configuration"}
)

BLOCK_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control", "transformations"}),
    "document": frozenset({"type", "source", "cache_control", "citations", "context", "title"}),
    "tool_use": frozenset(
        {"type", "id", "name", "input", "cache_control", "caller", "toolset_name"}
    ),
    "tool_result": frozenset(
        {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"}
    ),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
}
"""Fields of the content blocks validated in depth."""

# Blocks the SDK can send that the simulator passes through with a shallow check only.
_OPAQUE_BLOCKS: Final = frozenset(
    {
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "container_upload",
    }
)
_TOOL_RESULT_CONTENT: Final = frozenset(
    {"text", "image", "document", "search_result", "tool_reference", "browser_state"}
)
_ASSISTANT_ONLY: Final = frozenset({"tool_use", "thinking", "redacted_thinking"})
# Blocks only the beta API has, passed through with a shallow check under any beta.
_BETA_BLOCKS: Final = frozenset(
    {
        "advisor_tool_result",
        "compaction",
        "fallback",
        "mcp_tool_listing",
        "mcp_tool_result",
        "mcp_tool_use",
    }
)
# Tool changes in the conversation (beta): in a system message or any other.
_TOOL_CHANGES: Final = frozenset({"tool_addition", "tool_removal"})
# Beta-only fields of a role "system" message.
_SYSTEM_MESSAGE_BETA_KEYS: Final = frozenset({"clear_at", "output_config"})

CUSTOM_TOOL_KEYS: Final = frozenset(
    {
        "name",
        "description",
        "input_schema",
        "cache_control",
        "strict",
        "type",
        "allowed_callers",
        "defer_loading",
        "eager_input_streaming",
        "input_examples",
    }
)
TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_USE_ID: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
# Server tools are versioned by date (``web_search_20250305``); their own fields vary.
_SERVER_TOOL_TYPE: Final = re.compile(r"^[a-z][a-z0-9_]*_\d{8}$")
# Beta tool types without a date; toolsets (``mcp_toolset``, ``*_toolset_YYYYMMDD``) have
# no ``name`` of their own.
_UNDATED_BETA_TOOLS: Final = frozenset(
    {"mcp_toolset", "tool_search_tool_bm25", "tool_search_tool_regex"}
)

IMAGE_MEDIA_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
MAX_CACHE_BREAKPOINTS: Final = 4
MAX_MESSAGES: Final = 100_000
MIN_THINKING_BUDGET: Final = 1024
EFFORTS: Final = ("low", "medium", "high", "xhigh", "max")

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


# --------------------------------------------------------------------------- primitives


def _fail(path: str, message: str) -> NoReturn:
    raise SimulatorInvalidRequest(f"{path}: {message}" if path else message)


def _join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def _object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(path, "Input should be an object")
    return value


def _list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        _fail(path, "Input should be a valid list")
    return value


def _string(value: object, path: str, *, non_empty: bool = False) -> str:
    if not isinstance(value, str):
        _fail(path, "Input should be a valid string")
    if non_empty and not value:
        _fail(path, "String should have at least 1 character")
    return value


def _integer(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(path, "Input should be a valid integer")
    return value


def _number(value: object, path: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        _fail(path, "Input should be a valid number")
    if not low <= value <= high:
        _fail(path, f"Input should be between {low:g} and {high:g}")
    return float(value)


def _boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        _fail(path, "Input should be a valid boolean")
    return value


def _choice(value: object, path: str, options: tuple[str, ...]) -> str:
    if value not in options:
        listed = ", ".join(repr(o) for o in options)
        _fail(path, f"Input should be one of {listed}")
    return str(value)


def _only(obj: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            _fail(_join(path, key), "Extra inputs are not permitted")


def _required(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        _fail(_join(path, key), "Field required")
    return obj[key]


def _given(obj: Mapping[str, Any], key: str) -> bool:
    """True when an optional field is present and not ``null`` (null means "not set")."""
    return obj.get(key) is not None


# --------------------------------------------------------------------------- request


class _Walk:
    """One validation pass: the betas the request names (as families, see ``betas.py``) and
    the ``cache_control`` breakpoints counted so far across tools, system and messages."""

    __slots__ = ("betas", "breakpoints")

    def __init__(self, betas: Iterable[str]) -> None:
        self.betas = beta_families(betas)
        self.breakpoints = 0

    @property
    def any_beta(self) -> bool:
        """Whether the request names a beta at all (which unlocks the beta API's shapes)."""
        return bool(self.betas)


def _validate(
    body: object,
    *,
    api_version: str,
    allowed: frozenset[str],
    beta_keys: frozenset[str],
    betas: Iterable[str],
    count_tokens: bool,
) -> None:
    if api_version not in API_VERSIONS:
        _fail("anthropic-version", f"{api_version!r} is not a supported API version")
    if not isinstance(body, dict):
        _fail("body", "Input should be a JSON object")
    walk = _Walk(betas)
    _only(body, allowed | _unlocked(beta_keys, walk), "")

    model = _string(_required(body, "model", ""), "model", non_empty=True)
    # count_tokens: shape only (see the module docstring).
    caps = PERMISSIVE if count_tokens else model_capabilities(model)
    grammar = not count_tokens  # check the schemas that generation compiles to a grammar
    max_tokens: int | None = None
    if not count_tokens:
        max_tokens = _integer(_required(body, "max_tokens", ""), "max_tokens")
        if max_tokens < 0:  # 0 is valid: it pre-warms the prompt cache without a reply
            _fail("max_tokens", "Input should be greater than or equal to 0")

    tool_names = _tools(body, walk, grammar=grammar)
    if _given(body, "system"):
        _system(body["system"], walk)
    _messages(_required(body, "messages", ""), walk, caps)
    if walk.breakpoints > MAX_CACHE_BREAKPOINTS:
        _fail(
            "",
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {walk.breakpoints}.",
        )
    if not caps.prefill and body["messages"][-1]["role"] == "assistant":
        _fail("", PREFILL_UNSUPPORTED)

    forced_tool = _tool_choice(body, tool_names)
    thinking_on = _thinking(body, max_tokens, caps, walk)
    if thinking_on and forced_tool:
        _fail("tool_choice", "Thinking may not be enabled when tool_choice forces tool use.")
    _sampling(body, api_version=api_version, thinking_on=thinking_on, caps=caps)

    if _given(body, "stop_sequences"):
        for i, seq in enumerate(_list(body["stop_sequences"], "stop_sequences")):
            text = _string(seq, f"stop_sequences.{i}")
            if not text:
                _fail("stop_sequences", "each stop sequence must be non-empty")
            if not text.strip():
                _fail("stop_sequences", "each stop sequence must contain non-whitespace")
    if "stream" in body:
        _boolean(body["stream"], "stream")
    if _given(body, "metadata"):
        metadata = _object(body["metadata"], "metadata")
        _only(metadata, frozenset({"user_id"}), "metadata")
        if _given(metadata, "user_id"):
            _string(metadata["user_id"], "metadata.user_id")
    if _given(body, "output_config"):
        _output_config(body["output_config"], caps, walk, grammar=grammar)
    if _given(body, "service_tier"):
        _choice(body["service_tier"], "service_tier", ("auto", "standard_only"))
    if _given(body, "speed"):
        _choice(body["speed"], "speed", ("standard", "fast"))
    if _given(body, "inference_geo"):
        _string(body["inference_geo"], "inference_geo")
    if _given(body, "cache_control"):
        _cache_control(body["cache_control"], "cache_control")
    if _given(body, "container") and not isinstance(body["container"], str | dict):
        _fail("container", "Input should be a string or an object")
    if _given(body, "diagnostics"):
        _object(body["diagnostics"], "diagnostics")
    if _given(body, "context_management"):
        if _given(body, "compaction"):
            _fail("compaction", "compaction cannot be combined with context_management")
        _context_management(body["context_management"])
    if _given(body, "mcp_servers"):
        _mcp_servers(body["mcp_servers"])


def _unlocked(beta_keys: frozenset[str], walk: _Walk) -> frozenset[str]:
    """The beta-API top-level fields the request's betas unlock (see ``betas.py``)."""
    if not walk.any_beta:
        return frozenset()
    return frozenset(
        key for key in beta_keys if key not in BETA_FIELDS or BETA_FIELDS[key] & walk.betas
    )


def _sampling(
    body: Mapping[str, Any], *, api_version: str, thinking_on: bool, caps: ModelCapabilities
) -> None:
    if api_version == NEW_API_VERSION:
        for name in SAMPLING_PARAMS:
            if name in body:
                _fail(name, f"Extra inputs are not permitted with anthropic-version {api_version}")
        return
    given = [name for name in SAMPLING_PARAMS if _given(body, name)]
    temperature = _number(body["temperature"], "temperature", 0, 1) if "temperature" in given else 1
    top_p = _number(body["top_p"], "top_p", 0, 1) if "top_p" in given else 1
    if "top_k" in given and _integer(body["top_k"], "top_k") < 0:
        _fail("top_k", "Input should be greater than or equal to 0")
    if given and not caps.sampling:
        _fail("", f"`{given[0]}` is deprecated for this model.")
    if thinking_on:
        if temperature != 1:
            _fail("temperature", "temperature may only be set to 1 when thinking is enabled")
        if top_p < 0.95:
            _fail("top_p", "top_p must be between 0.95 and 1 when thinking is enabled")
        if "top_k" in given:
            _fail("top_k", "top_k may not be set when thinking is enabled")
    if "temperature" in given and "top_p" in given:
        _fail("temperature", "`temperature` and `top_p` cannot both be specified; use only one")


# --------------------------------------------------------------------------- tools


def _tools(body: Mapping[str, Any], walk: _Walk, *, grammar: bool) -> frozenset[str]:
    if not _given(body, "tools"):
        return frozenset()
    names: set[str] = set()
    for i, tool in enumerate(_list(body["tools"], "tools")):
        path = f"tools.{i}"
        tool = _object(tool, path)
        kind = tool.get("type")
        name: str | None = None
        if kind is not None and kind != "custom":
            if not isinstance(kind, str) or not (
                (walk.any_beta and kind in _UNDATED_BETA_TOOLS) or _SERVER_TOOL_TYPE.match(kind)
            ):
                _fail(_join(path, "type"), f"unknown tool type {kind!r}")
            if "toolset" not in kind or "name" in tool:  # a toolset names its server instead
                name = _string(_required(tool, "name", path), _join(path, "name"), non_empty=True)
        else:
            _only(tool, CUSTOM_TOOL_KEYS, path)
            name = _string(_required(tool, "name", path), _join(path, "name"))
            if not TOOL_NAME.match(name):
                _fail(_join(path, "name"), "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'")
            schema = _object(_required(tool, "input_schema", path), _join(path, "input_schema"))
            if schema.get("type") != "object":
                _fail(_join(path, "input_schema.type"), "Input should be 'object'")
            if any(key in schema for key in ("oneOf", "allOf", "anyOf")):
                _fail(
                    _join(path, "input_schema"),
                    "input_schema does not support oneOf, allOf, or anyOf at the top level",
                )
            if _given(tool, "description"):
                _string(tool["description"], _join(path, "description"))
            strict = _given(tool, "strict") and _boolean(tool["strict"], _join(path, "strict"))
            if _given(tool, "input_examples"):
                examples = _list(tool["input_examples"], _join(path, "input_examples"))
                for j, example in enumerate(examples):
                    _object(example, _join(path, f"input_examples.{j}"))
            if strict and grammar:  # compiled to a grammar: the JSON Schema subset only
                validate_schema_subset(schema, _join(path, "input_schema"))
        if _given(tool, "cache_control"):
            walk.breakpoints += 1
            _cache_control(tool["cache_control"], _join(path, "cache_control"))
        if name is None:
            continue
        if name in names:
            _fail("tools", "Tool names must be unique.")
        names.add(name)
    return frozenset(names)


def _tool_choice(body: Mapping[str, Any], tool_names: frozenset[str]) -> bool:
    """Validate ``tool_choice``; True when it forces tool use (``any`` or ``tool``)."""
    if not _given(body, "tool_choice"):
        return False
    choice = _object(body["tool_choice"], "tool_choice")
    kind = _choice(
        _required(choice, "type", "tool_choice"),
        "tool_choice.type",
        ("auto", "any", "tool", "none"),
    )
    if kind == "none":
        _only(choice, frozenset({"type"}), "tool_choice")
        return False
    allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if kind == "tool" else set())
    _only(choice, frozenset(allowed), "tool_choice")
    if _given(choice, "disable_parallel_tool_use"):
        _boolean(choice["disable_parallel_tool_use"], "tool_choice.disable_parallel_tool_use")
    if kind == "auto":
        return False
    if not tool_names:
        _fail("tool_choice", "tool_choice may only be specified while providing tools")
    if kind == "tool":
        name = _string(_required(choice, "name", "tool_choice"), "tool_choice.name")
        if name not in tool_names:
            _fail("tool_choice.name", f"Tool '{name}' not found in tools")
    return True


def _thinking(
    body: Mapping[str, Any], max_tokens: int | None, caps: ModelCapabilities, walk: _Walk
) -> bool:
    """Validate ``thinking``; True when the model will think (enabled or adaptive)."""
    if not _given(body, "thinking"):
        return False
    thinking = _object(body["thinking"], "thinking")
    kind = _choice(
        _required(thinking, "type", "thinking"),
        "thinking.type",
        ("enabled", "adaptive", "disabled", "between_tools"),
    )
    # thinking-binding-controls beta
    binding = frozenset({"block_binding"}) if walk.any_beta else frozenset()
    if kind == "enabled":
        _only(thinking, frozenset({"type", "budget_tokens", "display"}) | binding, "thinking")
        budget = _integer(
            _required(thinking, "budget_tokens", "thinking"), "thinking.budget_tokens"
        )
        if budget < MIN_THINKING_BUDGET:
            _fail(
                "thinking.budget_tokens",
                f"Input should be greater than or equal to {MIN_THINKING_BUDGET}",
            )
        if max_tokens is not None and budget >= max_tokens:
            _fail(
                "thinking.budget_tokens",
                "`max_tokens` must be greater than `thinking.budget_tokens`",
            )
    elif kind == "adaptive":
        _only(thinking, frozenset({"type", "display"}) | binding, "thinking")
    else:
        _only(thinking, frozenset({"type"}), "thinking")
    if _given(thinking, "display"):
        displays: tuple[str, ...] = ("summarized", "omitted")
        if THINKING_DISPLAY_UPDATES in walk.betas:
            displays += ("updates",)
        _choice(thinking["display"], "thinking.display", displays)
    if kind in ("enabled", "disabled") and not caps.manual_thinking:
        _fail(
            "",
            f'"thinking.type.{kind}" is not supported for this model. Use '
            '"thinking.type.adaptive" and "output_config.effort" to control thinking behavior.',
        )
    if kind == "adaptive" and not caps.adaptive_thinking:
        _fail(
            "",
            '"thinking.type.adaptive" is not supported for this model. Use '
            '"thinking.type.enabled" and "thinking.budget_tokens" to control thinking behavior.',
        )
    return kind in ("enabled", "adaptive")


def _output_config(value: object, caps: ModelCapabilities, walk: _Walk, *, grammar: bool) -> None:
    config = _object(value, "output_config")
    budget = frozenset({"task_budget"}) if walk.any_beta else frozenset()  # task-budgets beta
    _only(config, frozenset({"effort", "format"}) | budget, "output_config")
    if _given(config, "effort"):
        effort = _choice(config["effort"], "output_config.effort", EFFORTS)
        if not caps.effort:
            _fail("output_config.effort", "This model does not support the effort parameter.")
        if effort == "xhigh" and not caps.xhigh_effort:
            _fail(
                "output_config.effort",
                "'xhigh' is not supported for this model; use 'low', 'medium', 'high' or 'max'",
            )
    if _given(config, "format"):
        fmt = _object(config["format"], "output_config.format")
        _only(fmt, frozenset({"type", "schema"}), "output_config.format")
        _choice(
            _required(fmt, "type", "output_config.format"),
            "output_config.format.type",
            ("json_schema",),
        )
        schema = _object(
            _required(fmt, "schema", "output_config.format"), "output_config.format.schema"
        )
        if grammar:
            validate_schema_subset(schema, "output_config.format.schema")


# Edit type -> its fields that hold a ``{"type": ..., "value": N}`` count, and their types.
_EDIT_COUNTS: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    "clear_tool_uses_20250919": {
        "trigger": ("input_tokens", "tool_uses"),
        "keep": ("tool_uses",),
        "clear_at_least": ("input_tokens",),
    },
    "clear_thinking_20251015": {"keep": ("thinking_turns", "all")},
    "compact_20260112": {"trigger": ("input_tokens",)},
}


def _context_management(value: object) -> None:
    """``context_management`` (beta): each edit's tag, fields and their types."""
    config = _object(value, "context_management")
    _only(config, frozenset({"edits"}), "context_management")
    if not _given(config, "edits"):
        return
    for i, edit in enumerate(_list(config["edits"], "context_management.edits")):
        path = f"context_management.edits.{i}"
        edit = _object(edit, path)
        kind = _required(edit, "type", path)
        if not isinstance(kind, str) or kind not in CONTEXT_EDIT_KEYS:
            _fail(
                _join(path, "type"),
                f"Input tag {kind!r} found using 'type' does not match any of the expected tags",
            )
        _only(edit, CONTEXT_EDIT_KEYS[kind], path)
        for key, types in _EDIT_COUNTS[kind].items():
            if not _given(edit, key) or (kind == "clear_thinking_20251015" and edit[key] == "all"):
                continue
            kpath = _join(path, key)
            count = _object(edit[key], kpath)
            if _choice(_required(count, "type", kpath), _join(kpath, "type"), types) != "all":
                _only(count, frozenset({"type", "value"}), kpath)
                if _integer(_required(count, "value", kpath), _join(kpath, "value")) < 0:
                    _fail(_join(kpath, "value"), "Input should be greater than or equal to 0")
        for key in ("exclude_tools", "clear_tool_inputs"):  # tool names; or a bool for the latter
            names = edit.get(key)
            if names is None or (key == "clear_tool_inputs" and isinstance(names, bool)):
                continue
            for j, name in enumerate(_list(names, _join(path, key))):
                _string(name, _join(path, f"{key}.{j}"))
        if _given(edit, "instructions"):
            _string(edit["instructions"], _join(path, "instructions"))
        if _given(edit, "pause_after_compaction"):
            _boolean(edit["pause_after_compaction"], _join(path, "pause_after_compaction"))


def _mcp_servers(value: object) -> None:
    """``mcp_servers`` (beta): URL server definitions."""
    for i, server in enumerate(_list(value, "mcp_servers")):
        path = f"mcp_servers.{i}"
        server = _object(server, path)
        _only(server, MCP_SERVER_KEYS, path)
        _string(_required(server, "name", path), _join(path, "name"), non_empty=True)
        _choice(_required(server, "type", path), _join(path, "type"), ("url",))
        _string(_required(server, "url", path), _join(path, "url"), non_empty=True)
        if _given(server, "authorization_token"):
            _string(server["authorization_token"], _join(path, "authorization_token"))
        if _given(server, "tool_configuration"):
            _object(server["tool_configuration"], _join(path, "tool_configuration"))


def _cache_control(value: object, path: str) -> None:
    control = _object(value, path)
    _only(control, frozenset({"type", "ttl"}), path)
    _choice(_required(control, "type", path), _join(path, "type"), ("ephemeral",))
    if _given(control, "ttl"):
        _choice(control["ttl"], _join(path, "ttl"), ("5m", "1h"))


# --------------------------------------------------------------------------- system & messages


def _system(value: object, walk: _Walk) -> None:
    if isinstance(value, str):
        return
    for i, block in enumerate(_list(value, "system")):
        path = f"system.{i}"
        block = _object(block, path)
        if block.get("type") != "text":
            _fail(_join(path, "type"), "Input should be 'text'")
        _text_block(block, path, walk)


_EMPTY_CONTENT: Final = (
    "all messages must have non-empty content except for the optional final assistant message"
)


def _messages(value: object, walk: _Walk, caps: ModelCapabilities) -> None:
    messages = _list(value, "messages")
    if not messages:
        _fail("messages", "at least one message is required")
    if len(messages) > MAX_MESSAGES:
        _fail("messages", f"at most {MAX_MESSAGES} messages are allowed")
    last = len(messages) - 1
    for i, message in enumerate(messages):
        path = f"messages.{i}"
        message = _object(message, path)
        role = _choice(
            _required(message, "role", path), _join(path, "role"), ("user", "assistant", "system")
        )
        if role == "system":
            _system_message(message, path, walk, caps)
            continue
        _only(message, frozenset({"role", "content"}), path)
        content = _required(message, "content", path)
        prefill = i == last and role == "assistant"
        cpath = _join(path, "content")
        if isinstance(content, str):
            if prefill:
                if content != content.rstrip():
                    _fail(cpath, "final assistant content cannot end with trailing whitespace")
            elif not content.strip():
                _fail(cpath, _EMPTY_CONTENT)
            continue
        blocks = _list(content, cpath)
        if not blocks and not prefill:
            _fail(cpath, _EMPTY_CONTENT)
        for j, block in enumerate(blocks):
            _content_block(block, _join(cpath, j), role, walk)
        if prefill and blocks:
            tail = blocks[-1]
            if tail.get("type") == "text" and tail["text"] != tail["text"].rstrip():
                _fail(
                    _join(cpath, len(blocks) - 1),
                    "final assistant content cannot end with trailing whitespace",
                )
    _system_placement(messages)
    _turns(messages)


def _system_message(
    message: Mapping[str, Any], path: str, walk: _Walk, caps: ModelCapabilities
) -> None:
    """A ``role: "system"`` message (a mid-conversation system message).

    Models before Opus 4.8 refuse the role itself, unless the preview beta is named; a
    per-turn ``output_config`` (beta) with fields in it makes ``content`` optional.
    """
    if not (caps.system_messages or MID_CONVERSATION_SYSTEM in walk.betas):
        _fail(_join(path, "role"), "Input should be 'user' or 'assistant'")
    extra = _SYSTEM_MESSAGE_BETA_KEYS if walk.any_beta else frozenset()
    _only(message, frozenset({"role", "content"}) | extra, path)
    if _given(message, "clear_at"):
        _choice(message["clear_at"], _join(path, "clear_at"), ("next_user_message", "never"))
    per_turn = False
    if _given(message, "output_config"):
        opath = _join(path, "output_config")
        config = _object(message["output_config"], opath)
        _only(config, frozenset({"effort"}), opath)
        if _given(config, "effort"):
            _choice(config["effort"], _join(opath, "effort"), EFFORTS)
        per_turn = bool(config)
    if per_turn and message.get("content") is None:
        return
    content = _required(message, "content", path)
    cpath = _join(path, "content")
    if isinstance(content, str):
        if not content.strip() and not per_turn:
            _fail(cpath, _EMPTY_CONTENT)
        return
    blocks = _list(content, cpath)
    if not blocks and not per_turn:
        _fail(cpath, _EMPTY_CONTENT)
    for j, block in enumerate(blocks):
        _content_block(block, _join(cpath, j), "system", walk)


def _system_placement(messages: list[dict[str, Any]]) -> None:
    """Where system messages may stand: never first; right after a user message (or an
    assistant message ending in server tool use); last, or before an assistant message.
    Consecutive system messages are taken as one."""
    for i, message in enumerate(messages):
        if message["role"] != "system":
            continue
        path = f"messages.{i}"
        if i == 0:
            _fail(
                path,
                "the first message may not be a system message; "
                "put the system prompt in the top-level `system` field",
            )
        before = messages[i - 1]
        if before["role"] == "assistant" and not _ends_in_server_tool_use(before):
            _fail(
                path,
                "a system message must immediately follow a user message "
                "or an assistant message that ends in server tool use",
            )
        if i + 1 < len(messages) and messages[i + 1]["role"] == "user":
            _fail(
                path,
                "a system message must be the last message or be followed by an assistant message",
            )


def _ends_in_server_tool_use(message: Mapping[str, Any]) -> bool:
    content = message["content"]
    return (
        isinstance(content, list)
        and bool(content)
        and content[-1].get("type") in ("server_tool_use", "mcp_tool_use")
    )


def _content_block(value: object, path: str, role: str, walk: _Walk) -> None:
    block = _object(value, path)
    kind = _required(block, "type", path)
    known = isinstance(kind, str) and (
        kind in BLOCK_KEYS
        or kind in _OPAQUE_BLOCKS
        or (walk.any_beta and (kind in _BETA_BLOCKS or kind in _TOOL_CHANGES))
    )
    if not known:
        _fail(
            _join(path, "type"),
            f"Input tag {kind!r} found using 'type' does not match any of the expected tags",
        )
    if role == "system" and kind != "text" and kind not in _TOOL_CHANGES:
        _fail(_join(path, "type"), "system messages may only contain text blocks")
    if kind in _OPAQUE_BLOCKS or kind in _BETA_BLOCKS:
        return
    if kind in _TOOL_CHANGES:
        _only(block, frozenset({"type", "tool", "cache_control"}), path)
        _object(_required(block, "tool", path), _join(path, "tool"))
        _block_cache_control(block, path, walk)
        return
    if kind in _ASSISTANT_ONLY and role != "assistant":
        _fail(_join(path, "type"), f"`{kind}` blocks are only allowed in assistant messages")
    if kind == "tool_result" and role != "user":
        _fail(_join(path, "type"), "`tool_result` blocks are only allowed in user messages")
    if kind == "text":
        _text_block(block, path, walk)
    elif kind == "image":
        _image_block(block, path, walk)
    elif kind == "document":
        _document_block(block, path, walk)
    elif kind == "tool_use":
        _only(block, BLOCK_KEYS["tool_use"], path)
        tool_id = _string(_required(block, "id", path), _join(path, "id"))
        if not TOOL_USE_ID.match(tool_id):
            _fail(_join(path, "id"), "String should match pattern '^[a-zA-Z0-9_-]+$'")
        _string(_required(block, "name", path), _join(path, "name"), non_empty=True)
        _object(_required(block, "input", path), _join(path, "input"))
        _block_cache_control(block, path, walk)
    elif kind == "tool_result":
        _tool_result_block(block, path, walk)
    elif kind == "thinking":
        _only(block, BLOCK_KEYS["thinking"], path)
        _string(_required(block, "thinking", path), _join(path, "thinking"))
        _string(_required(block, "signature", path), _join(path, "signature"))
    else:  # redacted_thinking
        _only(block, BLOCK_KEYS["redacted_thinking"], path)
        _string(_required(block, "data", path), _join(path, "data"))


def _block_cache_control(block: Mapping[str, Any], path: str, walk: _Walk) -> None:
    if _given(block, "cache_control"):
        walk.breakpoints += 1
        _cache_control(block["cache_control"], _join(path, "cache_control"))


def _text_block(block: Mapping[str, Any], path: str, walk: _Walk) -> None:
    _only(block, BLOCK_KEYS["text"], path)
    text = _string(_required(block, "text", path), _join(path, "text"))
    if not text:
        _fail(_join(path, "text"), "text content blocks must be non-empty")
    if not text.strip():
        _fail(_join(path, "text"), "text content blocks must contain non-whitespace text")
    if _given(block, "citations"):
        _list(block["citations"], _join(path, "citations"))
    _block_cache_control(block, path, walk)


def _image_block(block: Mapping[str, Any], path: str, walk: _Walk) -> None:
    _only(block, BLOCK_KEYS["image"], path)
    spath = _join(path, "source")
    source = _object(_required(block, "source", path), spath)
    kind = _choice(
        _required(source, "type", spath), _join(spath, "type"), ("base64", "url", "file")
    )
    if kind == "base64":
        _only(source, frozenset({"type", "media_type", "data"}), spath)
        media = _required(source, "media_type", spath)
        if media not in IMAGE_MEDIA_TYPES:
            _fail(
                _join(spath, "media_type"),
                "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
            )
        _string(_required(source, "data", spath), _join(spath, "data"), non_empty=True)
    elif kind == "url":
        _only(source, frozenset({"type", "url"}), spath)
        _string(_required(source, "url", spath), _join(spath, "url"), non_empty=True)
    else:
        _only(source, frozenset({"type", "file_id"}), spath)
        _string(_required(source, "file_id", spath), _join(spath, "file_id"), non_empty=True)
    _block_cache_control(block, path, walk)


def _document_block(block: Mapping[str, Any], path: str, walk: _Walk) -> None:
    _only(block, BLOCK_KEYS["document"], path)
    spath = _join(path, "source")
    source = _object(_required(block, "source", path), spath)
    kind = _choice(
        _required(source, "type", spath),
        _join(spath, "type"),
        ("base64", "text", "content", "url", "file"),
    )
    if kind in ("base64", "text"):
        _only(source, frozenset({"type", "media_type", "data"}), spath)
        expected = "application/pdf" if kind == "base64" else "text/plain"
        _choice(_required(source, "media_type", spath), _join(spath, "media_type"), (expected,))
        _string(_required(source, "data", spath), _join(spath, "data"), non_empty=kind == "base64")
    elif kind == "content":
        _only(source, frozenset({"type", "content"}), spath)
        content = _required(source, "content", spath)
        if not isinstance(content, str):
            for j, item in enumerate(_list(content, _join(spath, "content"))):
                ipath = _join(spath, f"content.{j}")
                if _object(item, ipath).get("type") not in ("text", "image"):
                    _fail(_join(ipath, "type"), "Input should be 'text' or 'image'")
                _content_block(item, ipath, "user", walk)
    elif kind == "url":
        _only(source, frozenset({"type", "url"}), spath)
        _string(_required(source, "url", spath), _join(spath, "url"), non_empty=True)
    else:
        _only(source, frozenset({"type", "file_id"}), spath)
        _string(_required(source, "file_id", spath), _join(spath, "file_id"), non_empty=True)
    for key in ("title", "context"):
        if _given(block, key):
            _string(block[key], _join(path, key))
    if _given(block, "citations"):
        _object(block["citations"], _join(path, "citations"))
    _block_cache_control(block, path, walk)


def _tool_result_block(block: Mapping[str, Any], path: str, walk: _Walk) -> None:
    _only(block, BLOCK_KEYS["tool_result"], path)
    tool_use_id = _string(_required(block, "tool_use_id", path), _join(path, "tool_use_id"))
    if not TOOL_USE_ID.match(tool_use_id):
        _fail(_join(path, "tool_use_id"), "String should match pattern '^[a-zA-Z0-9_-]+$'")
    if _given(block, "is_error"):
        _boolean(block["is_error"], _join(path, "is_error"))
    content = block.get("content")
    if content is not None and not isinstance(content, str):
        cpath = _join(path, "content")
        for j, item in enumerate(_list(content, cpath)):
            ipath = _join(cpath, j)
            item = _object(item, ipath)
            kind = _required(item, "type", ipath)
            if not isinstance(kind, str) or kind not in _TOOL_RESULT_CONTENT:
                _fail(
                    _join(ipath, "type"),
                    f"Input tag {kind!r} found using 'type' does not "
                    "match any of the expected tags",
                )
            if kind in ("text", "image", "document"):
                _content_block(item, ipath, "user", walk)
    _block_cache_control(block, path, walk)


# --------------------------------------------------------------------------- turn structure


def _turns(messages: list[dict[str, Any]]) -> None:
    """Cross-message rules, applied to turns (consecutive same-role messages merged).

    * every ``tool_use`` id is unique;
    * an assistant turn's ``tool_use`` ids are each answered by a ``tool_result`` in the
      next (user) turn, when there is one;
    * a ``tool_result`` answers a ``tool_use`` of the immediately preceding assistant turn;
    * in a user turn, ``tool_result`` blocks come before any other content.
    """
    seen_ids: set[str] = set()
    pending: dict[str, int] = {}  # tool_use ids of the previous assistant turn -> message index
    answered: set[str] = set()
    role = ""  # role of the current turn
    other_content = False  # current user turn already holds a non-tool_result block
    for i, message in enumerate(messages):
        if message["role"] == "system":
            continue
        if message["role"] != role:
            if role == "user" and pending:
                _unanswered(pending, answered)
            if message["role"] == "assistant":
                pending = {}
            answered = set()
            other_content = False
            role = message["role"]
        content = message["content"]
        if isinstance(content, str):
            other_content = True
            continue
        for j, block in enumerate(content):
            kind = block["type"]
            if role == "assistant" and kind == "tool_use":
                tool_id = block["id"]
                if tool_id in seen_ids:
                    _fail(f"messages.{i}.content.{j}", "`tool_use` ids must be unique")
                seen_ids.add(tool_id)
                pending[tool_id] = i
            elif role == "user" and kind == "tool_result":
                tool_id = block["tool_use_id"]
                if tool_id not in pending:
                    _fail(
                        f"messages.{i}.content.{j}",
                        f"unexpected `tool_use_id` found in `tool_result` blocks: {tool_id}. "
                        "Each `tool_result` block must have a corresponding `tool_use` block "
                        "in the previous message.",
                    )
                if other_content:
                    _fail(
                        f"messages.{i}.content.{j}",
                        "`tool_result` blocks must come first in the user message, before "
                        "any other content",
                    )
                answered.add(tool_id)
            elif role == "user":
                other_content = True
    if role == "user" and pending:
        _unanswered(pending, answered)


def _unanswered(pending: Mapping[str, int], answered: set[str]) -> None:
    missing = [tool_id for tool_id in pending if tool_id not in answered]
    if missing:
        index = pending[missing[0]]
        _fail(
            f"messages.{index}",
            f"`tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(missing)}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message.",
        )
