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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...errors import invalid_request
from .._common.fields import Ignored, optional_bool, optional_int, present
from .._common.model_traits import traits_for
from .._common.params import metadata_user_id, service_tier, stop_sequences
from .._common.preflight import MAX_CACHE_BREAKPOINTS as MAX_CACHE_BREAKPOINTS
from .._common.preflight import check_cache_breakpoints, check_prefill, marks_cache
from .._common.reasoning import MIN_THINKING_BUDGET as MIN_THINKING_BUDGET
from .._common.reasoning import THINKING_BUDGETS as THINKING_BUDGETS
from .._common.reasoning import thinking_for
from .._common.sampling import API_2026 as API_2026
from .._common.sampling import sampling
from .._common.structured_output import JSON_OBJECT_INSTRUCTION as JSON_OBJECT_INSTRUCTION
from .._common.structured_output import structured_output
from ._messages import convert_messages
from ._params import max_tokens_cap, reject_unsupported, stream_include_usage
from ._tools import translate_tool_choice, translate_tools

__all__ = ["TranslatedRequest", "TranslationOptions", "translate_request"]

DEFAULT_MODEL_ALIAS: Final = "default"

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
      flex: whether the gateway can batch ``service_tier: "flex"`` (``pipeline.flex``);
        without it the tier is named in ``ignored_params``, as every other tier is.
    """

    default_model: str
    default_max_tokens: int
    anthropic_version: str
    flex: bool = False


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
      service_tier: the ``service_tier`` the client asked for (a string), or None: replies
        then name the tier that served them (``flex`` or ``default``).
      flex: the request goes through the flex window (``service_tier: "flex"``, not a
        stream, and ``TranslationOptions.flex``); otherwise the tier is ignored.
    """

    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    ignored_params: tuple[str, ...]
    cap_param: str | None = None
    service_tier: str | None = None
    flex: bool = False

    @property
    def upstream_model(self) -> str:
        """The model actually called (``default`` resolved): what metrics and prices use."""
        return str(self.body["model"])


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
    reject_unsupported(payload)
    ignored = Ignored()

    stream = bool(optional_bool(payload, "stream"))
    include_usage = stream_include_usage(payload, stream, ignored)
    conversation = convert_messages(payload["messages"])
    for name in conversation.ignored:
        ignored.add(name)

    body: dict[str, Any] = {
        "model": options.default_model if model == DEFAULT_MODEL_ALIAS else model,
        "max_tokens": options.default_max_tokens,
        "messages": conversation.messages,
    }
    traits = traits_for(body["model"])
    check_prefill(
        body,
        traits,
        param=_last_assistant(payload["messages"]),
        ending="an assistant message",
        remedy="end it with a user message",
    )
    system = conversation.system
    cap = max_tokens_cap(payload, ignored)
    cap_param = (
        None
        if cap is None
        else "max_completion_tokens"
        if present(payload, "max_completion_tokens")
        else "max_tokens"
    )

    tools = translate_tools(payload.get("tools"))
    tool_choice = translate_tool_choice(payload, tools)
    if tools:
        body["tools"] = tools
    if tool_choice is not None:
        body["tool_choice"] = tool_choice

    system = system + _response_format(payload, body)
    if system:
        body["system"] = system

    stop = stop_sequences(payload.get("stop"), ignored)
    if stop:
        body["stop_sequences"] = stop
    user_id = metadata_user_id(payload, ignored)
    if user_id:
        body["metadata"] = {"user_id": user_id}

    thinking = thinking_for(
        payload.get("reasoning_effort"),
        "reasoning_effort",
        body,
        cap,
        traits,
        options.default_max_tokens,
        ignored,
    )
    if thinking is not None:
        body["thinking"] = thinking
    elif cap is not None:
        body["max_tokens"] = cap
    sampling(
        payload,
        body,
        thinking_on=thinking is not None,
        traits=traits,
        anthropic_version=options.anthropic_version,
        ignored=ignored,
    )

    check_cache_breakpoints(body, _breakpoint_params(payload))
    if stream:
        body["stream"] = True
    tier, flex = service_tier(payload, stream, options.flex)
    for key in IGNORED_PARAMS:
        if present(payload, key) and not (flex and key == "service_tier"):
            ignored.add(key)
    if optional_int(payload, "top_logprobs", minimum=0) == 0:
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
        service_tier=tier,
        flex=flex,
    )


def _response_format(payload: Mapping[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    """``response_format`` (the schema under ``json_schema``) as structured output."""
    fmt = payload.get("response_format")
    if fmt is None:
        return []
    return structured_output(
        fmt.get("type") if isinstance(fmt, Mapping) else None,
        fmt.get("json_schema") if isinstance(fmt, Mapping) else None,
        body,
        type_param="response_format.type",
        spec_param="response_format.json_schema",
    )


def _last_assistant(messages: object) -> str:
    """The path of the last assistant message: where a prefill ends."""
    assistants = [
        i
        for i, m in enumerate(messages if isinstance(messages, list) else ())
        if isinstance(m, Mapping) and m.get("role") == "assistant"
    ]
    return f"messages[{assistants[-1]}]" if assistants else "messages"


def _breakpoint_params(payload: Mapping[str, Any]) -> Iterator[str]:
    """Where the client asked for cache breakpoints, in request order (tools, then messages)."""
    for i, tool in enumerate(payload.get("tools") or ()):
        if marks_cache(tool):
            yield f"tools[{i}]"
    for i, message in enumerate(payload.get("messages") or ()):
        content = message.get("content") if isinstance(message, Mapping) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if marks_cache(part):
                yield f"messages[{i}].content[{j}]"
