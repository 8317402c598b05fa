"""OpenAI ``POST /v1/responses`` body (+ stored history) → Anthropic Messages request body.

Theory of operation: ``translate_request`` is a pure function (but for the ids it gives
input items that came without one) from the client's JSON and the items of the earlier
turns to a ``ResponsesRequest``. It validates every field it reads and raises a 400
``invalid_request_error`` whose ``param`` names the field (``input[3].call_id``,
``tools[2].type``); nothing else escapes it. Every rule the two dialects share -- content
parts, tool schemas, structured output, thinking, sampling, stop sequences, the end-user
id, the turn builder -- is ``translation._common``'s, called with this dialect's paths, so
a rule fixed there is fixed for both. Each top-level field falls in exactly one class:

- translated: ``model``, ``input``, ``instructions``, ``previous_response_id`` (the door
  supplies its items as ``history``), ``store``, ``stream``, ``tools``, ``tool_choice``,
  ``parallel_tool_calls``, ``text``, ``reasoning``, ``max_output_tokens``, ``temperature``,
  ``top_p``, ``metadata`` (echoed and stored), ``user`` / ``safety_identifier``, ``stop``,
  ``truncation: disabled``, ``include: [reasoning.encrypted_content]``;
- ``service_tier: "flex"`` on a request that is not a stream, when the gateway can batch
  (``TranslationOptions.flex``): ``flex``, the request waits for a Message Batch;
- ignored, named in ``ignored_params``: ``truncation: auto``, the prompt cache hints
  (``prompt_cache_key``...), ``client_metadata``, other ``service_tier`` values, ``max_tool_calls``
  (it counts built-in tool calls, of which there are none), ``stream_options``, other
  ``include`` values, ``text.verbosity``, inert web search tools, unknown fields;
- run in the background: ``background: true`` (it needs ``store``: else a 400);
- rejected (400): ``conversation``, ``prompt``, ``top_logprobs > 0``,
  ``include: [message.output_text.logprobs]``, built-in tools, ``file_id`` references.

``echo`` holds the request fields every response object repeats, with OpenAI's defaults
filled in, already valid for the SDK's strict types.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ...errors import ProxyError, invalid_request
from .._common.content import string_blocks
from .._common.fields import Ignored, optional_bool, optional_int, optional_str, present
from .._common.model_traits import traits_for
from .._common.params import metadata_user_id, service_tier, stop_sequences
from .._common.preflight import check_cache_breakpoints, check_prefill, marks_cache
from .._common.reasoning import thinking_for
from .._common.sampling import sampling
from ..openai_chat import TranslationOptions
from ..openai_chat.request import DEFAULT_MODEL_ALIAS
from ._conversation import convert_items
from ._items import Item, normalize_input, normalize_item
from ._params import include_list, metadata, reasoning, reject_unsupported, text_format, truncation
from ._tools import translate_tool_choice, translate_tools

__all__ = ["ResponsesRequest", "translate_request"]

IGNORED_PARAMS: Final = (
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "client_metadata",
    "service_tier",
    "max_tool_calls",
    "stream_options",
    "context_management",
    "background_options",
    "moderation",
    "image",
    "access_programs",
)
_TRANSLATED: Final = frozenset(
    {
        "model",
        "input",
        "instructions",
        "previous_response_id",
        "store",
        "stream",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "max_output_tokens",
        "temperature",
        "top_p",
        "metadata",
        "user",
        "safety_identifier",
        "stop",
        "truncation",
        "include",
        "background",
        "conversation",
        "prompt",
        "top_logprobs",
    }
)
HISTORY_PARAM: Final = "previous_response_id"


@dataclass(frozen=True)
class ResponsesRequest:
    """The upstream body and what the door and codec need to answer in Responses' terms.

    Attributes:
      body: the Anthropic Messages request (never an OpenAI-only field).
      model: the model name as the client sent it (echoed).
      upstream_model: the model actually called (``default`` resolved).
      stream: whether the client asked for SSE.
      store: ``store`` (default true): whether the door keeps the response.
      previous_response_id: the response this one continues, if any.
      input_items: this request's input as canonical items (``_items``), each with an id:
        what ``input_items`` lists and what is stored.
      echo: the request fields repeated in the response object, defaults filled in.
      ignored_params: dropped without error, in request order, unique.
      cap_param: ``"max_output_tokens"`` if the client set it (names upstream cap errors).
      tool_names: Anthropic tool name → (namespace, name) as the client knows the tool.
      include: the honoured ``include`` values (``reasoning.encrypted_content``), which
        decide what ``client_view`` shows.
      flex: the request goes through the flex window (``service_tier: "flex"``, not a
        stream, ``TranslationOptions.flex``); the response then says ``"flex"``.
      background: ``background: true``: answered at once as ``queued`` and run by the
        gateway's background runner (``edge.background``).
    """

    body: dict[str, Any]
    model: str
    upstream_model: str
    stream: bool
    store: bool
    previous_response_id: str | None
    input_items: list[dict[str, Any]]
    echo: dict[str, Any]
    ignored_params: tuple[str, ...]
    cap_param: str | None
    tool_names: Mapping[str, tuple[str | None, str]]
    include: tuple[str, ...] = field(default=())
    flex: bool = False
    background: bool = False


def translate_request(
    payload: object,
    options: TranslationOptions,
    history: Sequence[Mapping[str, Any]] = (),
    references: Mapping[str, Mapping[str, Any]] | None = None,
) -> ResponsesRequest:
    """Translate one ``POST /v1/responses`` body.

    Args:
      payload: the client's JSON.
      options: the Chat path's settings (default model, default cap, API version).
      history: the canonical items of the earlier turns, oldest first (for each stored
        ancestor: its ``input_items``, then its output items).
      references: stored items by id, for the ``item_reference`` items of ``input`` that
        name no item of ``history`` (``item_references`` lists the ids to look up).

    Raises:
      ProxyError: 400 ``invalid_request_error`` with ``param`` naming the field at fault.
    """
    if not isinstance(payload, Mapping):
        raise invalid_request("The request body must be a JSON object.")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_request("model is required and must be a non-empty string.", param="model")
    if payload.get("input") is None:
        raise invalid_request("input is required.", param="input")
    reject_unsupported(payload)
    ignored = Ignored()
    stream = bool(optional_bool(payload, "stream"))
    store = optional_bool(payload, "store") is not False
    background = bool(optional_bool(payload, "background"))
    if background and not store:
        raise invalid_request(
            "background responses must be stored: send store: true (the default) with "
            "background: true.",
            param="background",
        )
    previous = optional_str(payload, "previous_response_id")
    instructions = optional_str(payload, "instructions")
    include = include_list(payload, ignored)
    meta = metadata(payload)
    truncated = truncation(payload, ignored)
    parallel = optional_bool(payload, "parallel_tool_calls")

    dropped: list[str] = []
    tools = translate_tools(payload.get("tools"), dropped)
    tool_choice = translate_tool_choice(payload, tools)
    try:
        past = [normalize_item(item, HISTORY_PARAM) for item in history]
        current = normalize_input(payload["input"], past, dropped, references)
        conversation = convert_items([(item, HISTORY_PARAM) for item in past] + current, tools)
    except ProxyError as exc:
        if (exc.param or "").startswith(HISTORY_PARAM):  # a stored item: no finer path to give
            exc.param = HISTORY_PARAM
            exc.message = f"The stored conversation cannot be continued: {exc.message}"
        raise
    for name in (*dropped, *conversation.ignored):
        ignored.add(name)

    upstream_model = options.default_model if model == DEFAULT_MODEL_ALIAS else model
    body: dict[str, Any] = {
        "model": upstream_model,
        "max_tokens": options.default_max_tokens,
        "messages": conversation.messages,
    }
    traits = traits_for(upstream_model)
    if conversation.last_assistant is not None:
        check_prefill(
            body,
            traits,
            param=conversation.last_assistant,
            ending="assistant output",
            remedy="end input with a user message or a function_call_output",
        )
    cap = optional_int(payload, "max_output_tokens", minimum=1)
    if tools.anthropic:
        body["tools"] = tools.anthropic
    if tool_choice is not None:
        body["tool_choice"] = tool_choice

    system = string_blocks(instructions or "") + conversation.system
    format_blocks, text_echo = text_format(payload, body, ignored)
    system += format_blocks
    if system:
        body["system"] = system
    stop = stop_sequences(payload.get("stop"), ignored)
    if stop:
        body["stop_sequences"] = stop
    user_id = metadata_user_id(payload, ignored)
    if user_id:
        body["metadata"] = {"user_id": user_id}

    effort, reasoning_echo = reasoning(payload, ignored)
    thinking = thinking_for(
        effort, "reasoning.effort", body, cap, traits, options.default_max_tokens, ignored
    )
    if thinking is not None:
        body["thinking"] = thinking
    elif cap is not None:
        body["max_tokens"] = cap
    sampled = {k: payload.get(k) for k in ("temperature", "top_p")}
    sampling(
        sampled,
        body,
        thinking_on=thinking is not None,
        traits=traits,
        anthropic_version=options.anthropic_version,
        ignored=ignored,
    )
    check_cache_breakpoints(body, _breakpoint_params(payload.get("tools"), current))
    if stream:
        body["stream"] = True

    _, flex = service_tier(payload, stream, options.flex)
    for key in IGNORED_PARAMS:
        if present(payload, key) and not (flex and key == "service_tier"):
            ignored.add(key)
    if optional_int(payload, "top_logprobs", minimum=0) == 0:
        ignored.add("top_logprobs")
    for key in payload:
        if key not in _TRANSLATED and key not in IGNORED_PARAMS:
            ignored.add(str(key))
    position = {key: i for i, key in enumerate(payload)}
    in_request_order = sorted(
        ignored.names, key=lambda n: position.get(n.split("[")[0].split(".")[0], 0)
    )
    echo = {
        "instructions": instructions,
        "metadata": meta,
        "tools": list(payload.get("tools") or []),
        "tool_choice": payload.get("tool_choice") or "auto",
        "parallel_tool_calls": True if parallel is None else parallel,
        "temperature": _given(payload.get("temperature"), 1.0),
        "top_p": _given(payload.get("top_p"), 1.0),
        "max_output_tokens": cap,
        "max_tool_calls": optional_int(payload, "max_tool_calls", minimum=0),
        "previous_response_id": previous,
        "reasoning": reasoning_echo,
        "store": store,
        "text": text_echo,
        "truncation": truncated,
        "user": optional_str(payload, "user"),
        "safety_identifier": optional_str(payload, "safety_identifier"),
        "prompt_cache_key": optional_str(payload, "prompt_cache_key"),
        "background": background,
        "service_tier": "default",
        "top_logprobs": 0,
    }
    return ResponsesRequest(
        body=body,
        model=model,
        upstream_model=upstream_model,
        stream=stream,
        store=store,
        previous_response_id=previous,
        input_items=[item for item, _ in current],
        echo=echo,
        ignored_params=tuple(in_request_order),
        cap_param="max_output_tokens" if cap is not None else None,
        tool_names=tools.names,
        include=include,
        flex=flex,
        background=background,
    )


def _given(value: object, default: float) -> object:
    return default if value is None else value


def _breakpoint_params(tools: object, items: list[tuple[Item, str]]) -> Iterator[str]:
    """Where the client asked for cache breakpoints, in request order (tools, then input)."""
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if marks_cache(tool):
            yield f"tools[{i}]"
        inner = tool.get("tools") if isinstance(tool, Mapping) else None
        for k, member in enumerate(inner if isinstance(inner, list) else ()):
            if marks_cache(member):
                yield f"tools[{i}].tools[{k}]"
    for item, param in items:
        key = "content" if item["type"] == "message" else "output"
        parts = item.get(key)
        for j, part in enumerate(parts if isinstance(parts, list) else ()):
            if marks_cache(part):
                yield f"{param}.{key}[{j}]"


def item_references(payload: object) -> list[str]:
    """The ids the ``item_reference`` items of a body name, for the caller to look up
    before ``translate_request`` (empty for anything that is not such a body)."""
    value = payload.get("input") if isinstance(payload, Mapping) else None
    if not isinstance(value, list):
        return []
    return [
        item["id"]
        for item in value
        if isinstance(item, Mapping)
        and item.get("type") == "item_reference"
        and isinstance(item.get("id"), str)
    ]
