"""OpenAI ``chat.completions`` request → Anthropic Messages request body.

Theory of operation: ``translate_request`` is a pure function from the client's JSON to a
``TranslatedRequest``. It validates every field it reads and raises a 400
``invalid_request_error`` whose ``param`` points at the offending field, so nothing invalid
reaches the upstream and the client learns about mistakes in OpenAI's vocabulary. Each
top-level OpenAI parameter falls in exactly one class (docs/compatibility.md lists them all):

- translated — mapped to its Anthropic equivalent;
- ignored — harmless to drop (``seed``, ``logit_bias``…), listed in ``ignored_params`` so the
  HTTP layer can name them in the ``x-trio-batcher-ignored-params`` header; unknown fields too;
- rejected — honouring them is impossible and dropping them would silently change the answer
  (``n > 1``, ``logprobs``, audio): 400.

The body never contains a field Anthropic does not know (it rejects extra inputs), and every
cross-field rule Anthropic enforces (thinking budget < max_tokens, thinking vs. sampling
parameters and forced tool choice, one of temperature/top_p) is resolved here, in favour of
what the client asked for most explicitly, and recorded in ``ignored_params`` when something
had to give.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...errors import invalid_request
from ._content import cache_control
from ._messages import convert_messages
from .model_traits import ModelTraits, traits_for
from .strict_schema import strict_schema

__all__ = ["TranslatedRequest", "TranslationOptions", "translate_request"]

API_2026: Final = "2026-10-21"
DEFAULT_MODEL_ALIAS: Final = "default"

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
MAX_CACHE_BREAKPOINTS: Final = 4  # Anthropic's limit per request

JSON_OBJECT_INSTRUCTION: Final = (
    "Respond only with a single valid JSON object. Do not wrap it in Markdown code fences "
    "and do not write anything before or after it."
)

_TOOL_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")

# Dropped without effect on the reply's shape; named in ignored_params when present.
IGNORED_PARAMS: Final = (
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "store",
    "metadata",
    "service_tier",
    "prediction",
    "web_search_options",
    "verbosity",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "moderation",
)
_TRANSLATED: Final = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "user",
        "safety_identifier",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "n",
        "logprobs",
        "top_logprobs",
        "audio",
        "modalities",
        "functions",
        "function_call",
    }
)


@dataclass(frozen=True)
class TranslationOptions:
    """Settings the translation needs.

    Attributes:
      default_model: sent upstream when the client's model is the literal ``"default"``.
      default_max_tokens: ``max_tokens`` when the client sets neither
        ``max_completion_tokens`` nor ``max_tokens``.
      anthropic_version: the ``anthropic-version`` the body is for; under ``2026-10-21``
        ``temperature``/``top_p``/``top_k`` are never sent (that version rejects them).
    """

    default_model: str
    default_max_tokens: int
    anthropic_version: str


@dataclass(frozen=True)
class TranslatedRequest:
    """The upstream body and what the HTTP layer needs to answer in OpenAI's terms.

    Attributes:
      body: the Anthropic Messages request (never contains OpenAI-only fields).
      model: the model name to echo to the client, as the client sent it.
      stream: whether the client asked for SSE.
      include_usage: ``stream_options.include_usage``.
      ignored_params: OpenAI parameters dropped without error, in request order, unique.
      cap_param: the client's field that became ``max_tokens`` (``max_completion_tokens``
        or ``max_tokens``); None when the gateway's default was sent. An upstream error
        about ``max_tokens`` is the client's to fix under that name.
    """

    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    ignored_params: tuple[str, ...]
    cap_param: str | None = None

    @property
    def upstream_model(self) -> str:
        """The model actually called (``default`` resolved): what metrics and prices use."""
        return str(self.body["model"])


# -- scalar validation -----------------------------------------------------------------


def _present(payload: Mapping[str, Any], key: str) -> bool:
    """OpenAI clients send ``null`` for "not set"; we read it the same way."""
    return payload.get(key) is not None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(payload: Mapping[str, Any], key: str, *, minimum: int) -> int | None:
    value = payload.get(key)
    if value is None:
        return None
    if not _is_int(value) or value < minimum:
        raise invalid_request(f"{key} must be an integer ≥ {minimum}.", param=key)
    return int(value)


def _number(payload: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = payload.get(key)
    if value is None:
        return None
    if not _is_number(value) or not low <= value <= high:
        raise invalid_request(f"{key} must be a number between {low:g} and {high:g}.", param=key)
    return value  # type: ignore[no-any-return]


def _bool(payload: Mapping[str, Any], key: str) -> bool | None:
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise invalid_request(f"{key} must be a boolean.", param=key)
    return value


def _str(payload: Mapping[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_request(f"{key} must be a string.", param=key)
    return value


# -- the translation ---------------------------------------------------------------------


class _Ignored:
    """Ordered, duplicate-free list of dropped parameter names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def add(self, name: str) -> None:
        if name not in self.names:
            self.names.append(name)


def translate_request(payload: object, options: TranslationOptions) -> TranslatedRequest:
    """Translate one ``POST /v1/chat/completions`` body.

    Raises:
      ProxyError: 400 ``invalid_request_error`` with ``param`` naming the field at fault.
    """
    if not isinstance(payload, Mapping):
        raise invalid_request("The request body must be a JSON object.")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_request("model is required and must be a non-empty string.", param="model")
    if "messages" not in payload:
        raise invalid_request("messages is required.", param="messages")
    _reject_unsupported(payload)
    ignored = _Ignored()

    stream = bool(_bool(payload, "stream"))
    include_usage = _stream_options(payload, stream, ignored)
    conversation = convert_messages(payload["messages"])
    for name in conversation.ignored:
        ignored.add(name)

    body: dict[str, Any] = {
        "model": options.default_model if model == DEFAULT_MODEL_ALIAS else model,
        "max_tokens": options.default_max_tokens,
        "messages": conversation.messages,
    }
    traits = traits_for(body["model"])
    _check_prefill(body, payload["messages"], traits)
    system = conversation.system
    cap = _max_tokens(payload, ignored)
    cap_param = (
        None
        if cap is None
        else "max_completion_tokens"
        if _present(payload, "max_completion_tokens")
        else "max_tokens"
    )

    tools = _tools(payload.get("tools"))
    tool_choice = _tool_choice(payload, tools)
    if tools:
        body["tools"] = tools
    if tool_choice is not None:
        body["tool_choice"] = tool_choice

    system = system + _response_format(payload, body)
    if system:
        body["system"] = system

    stop = _stop(payload.get("stop"), ignored)
    if stop:
        body["stop_sequences"] = stop
    user_id = _user_id(payload, ignored)
    if user_id:
        body["metadata"] = {"user_id": user_id}

    thinking = _thinking(payload, body, cap, traits, options, ignored)
    if thinking is not None:
        body["thinking"] = thinking
    elif cap is not None:
        body["max_tokens"] = cap
    _sampling(
        payload,
        body,
        thinking_on=thinking is not None,
        traits=traits,
        options=options,
        ignored=ignored,
    )

    _check_cache_breakpoints(body, payload)
    if stream:
        body["stream"] = True
    for key in IGNORED_PARAMS:
        if _present(payload, key):
            ignored.add(key)
    if _int(payload, "top_logprobs", minimum=0) == 0:
        ignored.add("top_logprobs")
    for key in payload:
        if key not in _TRANSLATED and key not in IGNORED_PARAMS:
            ignored.add(str(key))
    position = {key: i for i, key in enumerate(payload)}  # "messages[].name" sorts as messages
    in_request_order = sorted(ignored.names, key=lambda n: position.get(n.split("[")[0], 0))
    return TranslatedRequest(
        body=body,
        model=model,
        stream=stream,
        include_usage=include_usage,
        ignored_params=tuple(in_request_order),
        cap_param=cap_param,
    )


def _check_prefill(body: Mapping[str, Any], messages: object, traits: ModelTraits) -> None:
    """A conversation ending with an assistant turn is a prefill, which Claude models from
    4.6 on refuse. Say so before sending, naming the message, rather than pass on a 400
    that blames a field the client never wrote."""
    if body["messages"][-1]["role"] != "assistant" or traits.prefill:
        return
    assistants = [
        i
        for i, m in enumerate(messages if isinstance(messages, list) else ())
        if isinstance(m, Mapping) and m.get("role") == "assistant"
    ]
    raise invalid_request(
        f"{body['model']} does not continue a conversation that ends with an assistant "
        "message (Claude models from 4.6 on take no prefill); end it with a user message.",
        param=f"messages[{assistants[-1]}]" if assistants else "messages",
    )


def _check_cache_breakpoints(body: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    """Anthropic rejects a fifth ``cache_control``; say so in our terms, before sending.

    The count is taken on the translated body (a blank part carries no breakpoint there);
    ``param`` names the first breakpoint past the limit in the client's own request order,
    so the client can see which one to drop.
    """
    blocks: list[Mapping[str, Any]] = [*body.get("tools", ()), *body.get("system", ())]
    for message in body["messages"]:
        for block in message["content"]:
            blocks.append(block)
            if isinstance(block.get("content"), list):  # a tool_result's own blocks
                blocks.extend(block["content"])
    found = sum(1 for block in blocks if "cache_control" in block)
    if found > MAX_CACHE_BREAKPOINTS:
        marked = list(_breakpoint_params(payload))
        raise invalid_request(
            f"At most {MAX_CACHE_BREAKPOINTS} cache breakpoints (cache_control or "
            f"prompt_cache_breakpoint) may be set in one request; found {found}.",
            param=marked[MAX_CACHE_BREAKPOINTS] if len(marked) > MAX_CACHE_BREAKPOINTS else None,
        )


def _breakpoint_params(payload: Mapping[str, Any]) -> Iterator[str]:
    """Where the client asked for cache breakpoints, in request order (tools, then messages)."""

    def marks(part: object) -> bool:
        return isinstance(part, Mapping) and (
            part.get("cache_control") is not None or part.get("prompt_cache_breakpoint") is not None
        )

    for i, tool in enumerate(payload.get("tools") or ()):
        if marks(tool):
            yield f"tools[{i}]"
    for i, message in enumerate(payload.get("messages") or ()):
        content = message.get("content") if isinstance(message, Mapping) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if marks(part):
                yield f"messages[{i}].content[{j}]"


def _reject_unsupported(payload: Mapping[str, Any]) -> None:
    """Parameters whose effect we cannot produce and whose absence would change the reply."""
    n = _int(payload, "n", minimum=1)
    if n is not None and n > 1:
        raise invalid_request("n > 1 is not supported: the upstream returns one choice.", param="n")
    if _bool(payload, "logprobs"):
        raise invalid_request("logprobs are not supported by the upstream.", param="logprobs")
    top_logprobs = _int(payload, "top_logprobs", minimum=0)
    if top_logprobs:
        raise invalid_request("logprobs are not supported by the upstream.", param="top_logprobs")
    if _present(payload, "audio"):
        raise invalid_request("Audio output is not supported.", param="audio")
    modalities = payload.get("modalities")
    if modalities is not None:
        if not isinstance(modalities, list) or not all(isinstance(m, str) for m in modalities):
            raise invalid_request("modalities must be an array of strings.", param="modalities")
        if any(m != "text" for m in modalities):
            raise invalid_request("Only the text modality is supported.", param="modalities")
    for legacy in ("functions", "function_call"):
        if _present(payload, legacy):
            raise invalid_request(
                f"The deprecated `{legacy}` parameter is not supported; use tools and tool_choice.",
                param=legacy,
            )


def _stream_options(payload: Mapping[str, Any], stream: bool, ignored: _Ignored) -> bool:
    options = payload.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, Mapping):
        raise invalid_request("stream_options must be an object.", param="stream_options")
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise invalid_request(
            "stream_options.include_usage must be a boolean.", param="stream_options.include_usage"
        )
    if not stream:
        ignored.add("stream_options")
        return False
    return bool(include)


def _max_tokens(payload: Mapping[str, Any], ignored: _Ignored) -> int | None:
    """The client's cap: ``max_completion_tokens`` › ``max_tokens``; None if neither."""
    completion = _int(payload, "max_completion_tokens", minimum=1)
    legacy = _int(payload, "max_tokens", minimum=1)
    if completion is not None and legacy is not None:
        ignored.add("max_tokens")
    return completion if completion is not None else legacy


def _stop(value: object, ignored: _Ignored) -> list[str]:
    """``stop`` as ``stop_sequences``.

    Lenient on length: OpenAI caps the list at 4, Anthropic has no small cap, so any number
    of strings is accepted. Empty and whitespace-only strings (``"\\n"`` is a common one) are
    dropped, because Anthropic rejects them, and named as ``stop[i]`` in ``ignored_params``
    so the client can see that the reply will not stop there; duplicates are sent once.
    """
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise invalid_request("stop must be a string or an array of strings.", param="stop")
    out: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise invalid_request(
                "stop must be a string or an array of strings.", param=f"stop[{i}]"
            )
        if not item.strip():
            ignored.add(f"stop[{i}]")
        elif item not in out:
            out.append(item)
    return out


def _user_id(payload: Mapping[str, Any], ignored: _Ignored) -> str | None:
    """``safety_identifier`` (OpenAI's successor to ``user``), else ``user``."""
    safety = _str(payload, "safety_identifier")
    user = _str(payload, "user")
    if safety and user:
        ignored.add("user")
    return safety or user or None


def _tools(value: object) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_request("tools must be an array.", param="tools")
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, tool in enumerate(value):
        param = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise invalid_request("A tool must be an object.", param=param)
        if tool.get("type") != "function":
            raise invalid_request(
                f"Unsupported tool type {tool.get('type')!r}; only function tools are supported.",
                param=f"{param}.type",
            )
        function = tool.get("function")
        if not isinstance(function, Mapping):
            raise invalid_request(
                "A function tool needs a function object.", param=f"{param}.function"
            )
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise invalid_request(
                "function.name must match ^[a-zA-Z0-9_-]{1,64}$.", param=f"{param}.function.name"
            )
        if name in names:
            raise invalid_request(f"Duplicate tool name {name!r}.", param=f"{param}.function.name")
        names.add(name)
        out: dict[str, Any] = {"name": name}
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise invalid_request(
                "function.description must be a string.", param=f"{param}.function.description"
            )
        if description:
            out["description"] = description
        out["input_schema"] = _input_schema(
            function.get("parameters"), f"{param}.function.parameters"
        )
        strict = function.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise invalid_request(
                    "function.strict must be a boolean.", param=f"{param}.function.strict"
                )
            out["strict"] = strict
            if strict:  # compiled into a grammar: only a subset of JSON Schema
                out["input_schema"] = strict_schema(out["input_schema"])
        control = cache_control(tool, param)
        if control is not None:
            out["cache_control"] = control
        tools.append(out)
    return tools


def _input_schema(parameters: object, param: str) -> dict[str, Any]:
    """``parameters`` as ``input_schema``; a missing or empty schema means "no arguments".

    Anthropic requires an object schema; OpenAI tolerates ``{"properties": …}`` without a
    ``type``, which is an object schema in all but name, so ``"type": "object"`` is added.
    """
    if parameters is None or parameters == {}:
        return {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise invalid_request("function.parameters must be a JSON Schema object.", param=param)
    for keyword in ("anyOf", "oneOf", "allOf"):
        if keyword in parameters:
            raise invalid_request(
                f"function.parameters cannot use {keyword} at the top level (Anthropic's tools "
                "take one object schema); move the alternatives into a property.",
                param=f"{param}.{keyword}",
            )
    if "type" not in parameters:
        return {"type": "object", **parameters}
    if parameters["type"] != "object":
        raise invalid_request(
            'function.parameters must have "type": "object".', param=f"{param}.type"
        )
    return dict(parameters)


def _tool_choice(payload: Mapping[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    parallel = _bool(payload, "parallel_tool_calls")
    choice = payload.get("tool_choice")
    names = [t["name"] for t in tools]
    if choice is None:
        result: dict[str, Any] | None = None
    elif choice in ("none", "auto"):
        result = {"type": choice}
    elif choice == "required":
        result = {"type": "any"}
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise invalid_request(
                "tool_choice.function.name is required.", param="tool_choice.function.name"
            )
        if name not in names:
            raise invalid_request(
                f"tool_choice names {name!r}, which is not in tools.",
                param="tool_choice.function.name",
            )
        result = {"type": "tool", "name": name}
    elif isinstance(choice, Mapping) and choice.get("type") == "allowed_tools":
        result = _allowed_tools(choice, tools, names)
    else:
        raise invalid_request(
            'tool_choice must be "none", "auto", "required", a function or allowed_tools.',
            param="tool_choice",
        )
    if not tools:
        if result is not None and result["type"] not in ("none", "auto"):
            raise invalid_request("tool_choice requires tools.", param="tool_choice")
        return None  # "none"/"auto" without tools mean what no tools mean
    if parallel is False:
        if result is None:
            result = {"type": "auto"}
        if result["type"] != "none":
            result["disable_parallel_tool_use"] = True
    return result


def _allowed_tools(
    choice: Mapping[str, Any], tools: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    """``allowed_tools`` restricts the callable tools: the tool list is cut down to them
    (Anthropic has no "offered but not callable" state), in place."""
    allowed = choice.get("allowed_tools")
    if not isinstance(allowed, Mapping) or allowed.get("mode") not in ("auto", "required"):
        raise invalid_request(
            'tool_choice.allowed_tools needs mode "auto" or "required" and tools.',
            param="tool_choice.allowed_tools",
        )
    entries = allowed.get("tools")
    if not isinstance(entries, list):
        raise invalid_request(
            "allowed_tools.tools must be an array.", param="tool_choice.allowed_tools.tools"
        )
    keep: set[str] = set()
    for i, entry in enumerate(entries):
        function = entry.get("function") if isinstance(entry, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or name not in names:
            raise invalid_request(
                "allowed_tools entries must name function tools from tools.",
                param=f"tool_choice.allowed_tools.tools[{i}]",
            )
        keep.add(name)
    tools[:] = [t for t in tools if t["name"] in keep]
    return {"type": "auto" if allowed["mode"] == "auto" else "any"}


def _response_format(payload: Mapping[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    """Structured output. Returns system blocks to append (for ``json_object``)."""
    fmt = payload.get("response_format")
    if fmt is None:
        return []
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "text":
        return []
    if kind == "json_object":
        # Best effort: Anthropic has no schema-less JSON mode; an instruction gets close.
        return [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]
    if kind == "json_schema":
        assert isinstance(fmt, Mapping)
        spec = fmt.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise invalid_request(
                "response_format.json_schema needs a name.",
                param="response_format.json_schema.name",
            )
        schema = spec.get("schema")
        if schema is not None and not isinstance(schema, Mapping):
            raise invalid_request(
                "response_format.json_schema.schema must be an object.",
                param="response_format.json_schema.schema",
            )
        if schema is None or _any_object(schema):
            # "Some JSON object" is no grammar (the subset would allow only {}): ask for one.
            return [{"type": "text", "text": JSON_OBJECT_INSTRUCTION}]
        # Always compiled into a grammar, strict or not: only a subset of JSON Schema.
        body["output_config"] = {"format": {"type": "json_schema", "schema": strict_schema(schema)}}
        return []
    raise invalid_request(
        'response_format.type must be "text", "json_object" or "json_schema".',
        param="response_format.type",
    )


def _any_object(schema: Mapping[str, Any]) -> bool:
    """A schema that says only "an object" (no properties, no branches)."""
    shaping = ("properties", "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "items")
    return schema.get("type", "object") == "object" and not any(k in schema for k in shaping)


def _thinking(
    payload: Mapping[str, Any],
    body: dict[str, Any],
    cap: int | None,
    traits: ModelTraits,
    options: TranslationOptions,
    ignored: _Ignored,
) -> dict[str, Any] | None:
    """Extended thinking for ``reasoning_effort``, and the ``max_tokens`` that goes with it.

    Models that think adaptively (``model_traits``) get ``{type: adaptive}`` with the effort
    as ``output_config.effort`` (an effort the model lacks becomes the nearest one below:
    ``xhigh`` → ``max`` → ``high``), and ``max_tokens`` as below; older models get a fixed
    budget. OpenAI's ``max_completion_tokens`` includes reasoning tokens, exactly like Anthropic's
    ``max_tokens``, so a client's cap is kept and the budget shrinks to fit under it
    (``budget < max_tokens`` is Anthropic's rule); below the 1024-token minimum there is no
    room to think and thinking is left off. Without a client cap the budget comes on top of
    ``default_max_tokens``. Thinking is also left off — and ``reasoning_effort`` listed as
    ignored — when the request forces a tool (Anthropic forbids both), or when the last
    assistant turn (a prefill, or the turn whose tool results are being returned) does not
    start with a thinking block, which Anthropic requires once thinking is on.
    """
    effort = payload.get("reasoning_effort")
    if effort is None:
        return None
    if effort in _NO_THINKING:  # a tuple: membership never hashes the value
        return None
    if not isinstance(effort, str) or effort not in THINKING_BUDGETS:
        raise invalid_request(
            f"reasoning_effort must be one of {', '.join((*_NO_THINKING, *THINKING_BUDGETS))}.",
            param="reasoning_effort",
        )
    budget = THINKING_BUDGETS[effort]
    if cap is not None and not traits.adaptive_thinking:
        budget = min(budget, cap - 1)
    forced_tool = body.get("tool_choice", {}).get("type") in ("any", "tool")
    if budget < MIN_THINKING_BUDGET or forced_tool or not _can_think(body["messages"]):
        ignored.add("reasoning_effort")
        return None
    # Without a client cap, the budget is headroom on top of the default, adaptive or not.
    body["max_tokens"] = cap if cap is not None else options.default_max_tokens + budget
    if traits.adaptive_thinking:
        body.setdefault("output_config", {})["effort"] = _effort(effort, traits)
        return {"type": "adaptive"}
    return {"type": "enabled", "budget_tokens": budget}


def _effort(effort: str, traits: ModelTraits) -> str:
    """``reasoning_effort`` as an ``output_config.effort`` the model has."""
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


def _top_k(payload: Mapping[str, Any]) -> int | None:
    """``top_k`` (vLLM-style extension); 0 or negative means "no restriction", as in vLLM."""
    value = payload.get("top_k")
    if value is None:
        return None
    if not _is_int(value):
        raise invalid_request("top_k must be an integer.", param="top_k")
    return int(value) if value > 0 else None


def _sampling(
    payload: Mapping[str, Any],
    body: dict[str, Any],
    *,
    thinking_on: bool,
    traits: ModelTraits,
    options: TranslationOptions,
    ignored: _Ignored,
) -> None:
    """``temperature``, ``top_p``, ``top_k`` — or the reason they are not sent.

    ``temperature`` is clamped into Anthropic's [0, 1] (OpenAI allows up to 2; it is clamped,
    not rescaled, so 0.7 means 0.7 on both). Models from the 4.5 generation reject
    ``temperature`` and ``top_p`` together, so with both only ``temperature`` is sent.
    ``top_k`` is not OpenAI's but is accepted as an extension. None of them is sent under
    ``anthropic-version: 2026-10-21`` or to a model that refuses them (Opus 4.7 on,
    generation 5 on: ``model_traits``), which reject them, or with thinking on (which forbids
    changing them).
    """
    temperature = _number(payload, "temperature", 0, 2)
    top_p = _number(payload, "top_p", 0, 1)
    top_k = _top_k(payload)
    given = [
        (key, value)
        for key, value in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k))
        if value is not None
    ]
    if options.anthropic_version == API_2026 or thinking_on or not traits.sampling:
        for key, _ in given:
            ignored.add(key)
        return
    if temperature is not None:
        body["temperature"] = min(temperature, 1)
        if top_p is not None:
            ignored.add("top_p")
    elif top_p is not None:
        body["top_p"] = top_p
    if top_k is not None:
        body["top_k"] = top_k
