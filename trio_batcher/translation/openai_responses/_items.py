"""The request's ``input`` as Responses items in one canonical shape, each with an ``id``.

Theory of operation: clients write the same item many ways (a bare string; ``{role,
content}`` without ``type``; content as a string or as parts; assistant turns as
``output_text`` parts or as ``input_text``; ``item_reference`` to an earlier item). Every
later step -- the conversion to Anthropic messages, the store, ``input_items`` listings, and
the history a later ``previous_response_id`` brings back -- reads one shape only, the one
OpenAI itself lists (``ResponseItem``):

- ``message`` (user / system / developer): ``{type, id, role, status, content: [parts]}``
  with ``input_text`` / ``input_image`` (``detail`` defaulted to ``auto``) / ``input_file``;
- ``message`` (assistant): ``{type, id, role, status, content: [output_text | refusal]}``;
- ``function_call``: ``{type, id, call_id, name, arguments, status[, namespace]}``;
- ``function_call_output``: ``{type, id, call_id, output, status}``;
- ``reasoning``: ``{type, id, summary[, encrypted_content][, content]}``.

Shapes are checked here (types of fields, known item and part types); what the content
*means* (a valid data URL, JSON arguments, call pairing) is checked by the conversion, which
names the same ``input[i]…`` paths. Ids the client gave are kept; others are generated.
Nothing here raises anything but ``ProxyError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ...errors import invalid_request
from ._ids import new_item_id

__all__ = ["Item", "normalize_input", "normalize_item"]

Item = dict[str, Any]

_ROLES: Final = ("user", "assistant", "system", "developer")
_STATUSES: Final = ("in_progress", "completed", "incomplete")
_DETAILS: Final = ("low", "high", "auto", "original")
# Items of OpenAI's own tools: this gateway offers none of those tools, so none can be replayed.
_TOOL_ITEMS: Final = frozenset(
    {
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "custom_tool_call",
        "custom_tool_call_output",
        "tool_search_call",
        "tool_search_output",
        "compaction",
        "compaction_trigger",
        "additional_tools",
        "program",
        "program_output",
    }
)
# A record of a past web search: inert history (what was found is in the reply after it).
_DROPPED_ITEMS: Final = frozenset({"web_search_call"})


def normalize_input(
    value: object,
    history: Sequence[Mapping[str, Any]],
    ignored: list[str],
    references: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[tuple[Item, str]]:
    """``input`` (a string or a list of items) as canonical items, each with its path
    (``input[i]``) for the errors found in it later.

    ``item_reference`` items are replaced by the item they name (a copy): one of the
    history, else one of ``references`` (stored items the caller looked up by id: a
    client that keeps ``store`` on may name an earlier response's items without chaining
    it, as the Vercel AI SDK does in a tool loop). Items dropped as inert are named in
    ``ignored``.

    Raises:
      ProxyError: 400 naming ``input`` or ``input[i]…``.
    """
    if isinstance(value, str):
        return [(_message({"role": "user", "content": value}, "input"), "input")]
    if not isinstance(value, list):
        raise invalid_request("input must be a string or an array of items.", param="input")
    by_id: dict[object, Mapping[str, Any]] = {}
    by_id.update(references or {})
    by_id.update((item.get("id"), item) for item in history if isinstance(item, Mapping))
    items: list[tuple[Item, str]] = []
    for i, raw in enumerate(value):
        param = f"input[{i}]"
        if isinstance(raw, Mapping) and raw.get("type") == "item_reference":
            ref = raw.get("id")
            found = by_id.get(ref) if isinstance(ref, str) else None
            if found is None:
                raise invalid_request(
                    "item_reference names no stored item: it must be an item of a stored "
                    "response (store: true) created with this key and not deleted or expired.",
                    param=f"{param}.id",
                )
            items.append((normalize_item(found, "previous_response_id"), param))
        elif isinstance(raw, Mapping) and _kind(raw) in _DROPPED_ITEMS:
            ignored.append(param)
        else:
            items.append((normalize_item(raw, param), param))
    return items


def _kind(raw: Mapping[str, Any]) -> str | None:
    """An item's ``type`` if it is a string: a client's ``[]`` there cannot be hashed."""
    kind = raw.get("type")
    return kind if isinstance(kind, str) else None


def normalize_item(raw: object, param: str) -> Item:
    """One item in the canonical shape (see the module docstring)."""
    if not isinstance(raw, Mapping):
        raise invalid_request("An input item must be an object.", param=param)
    kind = raw.get("type")
    if kind is None and "role" in raw:
        kind = "message"
    if kind == "message":
        return _message(raw, param)
    if kind == "function_call":
        return _function_call(raw, param)
    if kind == "function_call_output":
        return _function_call_output(raw, param)
    if kind == "reasoning":
        return _reasoning(raw, param)
    if isinstance(kind, str) and kind in _TOOL_ITEMS:
        raise invalid_request(
            f"Input items of type {kind!r} are not supported: this gateway offers only "
            "function tools.",
            param=f"{param}.type",
        )
    raise invalid_request(
        f"Unknown input item type {kind!r}; expected message, function_call, "
        "function_call_output, reasoning or item_reference.",
        param=f"{param}.type",
    )


# -- fields ------------------------------------------------------------------------------


def _str(raw: Mapping[str, Any], key: str, param: str, *, required: bool = True) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise invalid_request(
            f"{key} must be a {'non-empty ' if required else ''}string.", param=f"{param}.{key}"
        )
    return value


def _text(raw: Mapping[str, Any], key: str, param: str) -> str:
    """A string field that may be empty (blank text is dropped later, not refused)."""
    value = raw.get(key)
    if not isinstance(value, str):
        raise invalid_request(f"{key} must be a string.", param=f"{param}.{key}")
    return value


def _id(raw: Mapping[str, Any], param: str, prefix: str) -> str:
    given = _str(raw, "id", param, required=False)
    return given or new_item_id(prefix)


def _status(raw: Mapping[str, Any], param: str) -> str:
    status = raw.get("status")
    if status is None:
        return "completed"
    if status not in _STATUSES:  # a tuple: membership never hashes the value
        raise invalid_request(
            f"status must be one of {', '.join(_STATUSES)}.", param=f"{param}.status"
        )
    return str(status)


def _cache_marks(part: Mapping[str, Any], out: Item) -> Item:
    """Cache breakpoints travel with their part (checked where they are converted)."""
    for key in ("prompt_cache_breakpoint", "cache_control"):
        if part.get(key) is not None:
            out[key] = part[key]
    return out


# -- messages ----------------------------------------------------------------------------


def _message(raw: Mapping[str, Any], param: str) -> Item:
    role = raw.get("role")
    if role not in _ROLES:
        raise invalid_request(f"role must be one of {', '.join(_ROLES)}.", param=f"{param}.role")
    content = raw.get("content")
    where = f"{param}.content"
    if isinstance(content, str):
        content = [
            {"type": "output_text" if role == "assistant" else "input_text", "text": content}
        ]
    if not isinstance(content, list):
        raise invalid_request("content must be a string or an array of content parts.", param=where)
    if role == "assistant":
        parts = [_assistant_part(part, f"{where}[{j}]") for j, part in enumerate(content)]
        item: Item = {
            "type": "message",
            "id": _id(raw, param, "msg"),
            "role": "assistant",
            "status": _status(raw, param),
            "content": parts,
        }
        phase = raw.get("phase")
        if phase in ("commentary", "final_answer"):
            item["phase"] = phase
        return item
    text_only = role in ("system", "developer")
    return {
        "type": "message",
        "id": _id(raw, param, "msg"),
        "role": role,
        "status": _status(raw, param),
        "content": [
            _input_part(part, f"{where}[{j}]", text_only) for j, part in enumerate(content)
        ],
    }


def _input_part(part: object, param: str, text_only: bool) -> Item:
    if not isinstance(part, Mapping):
        raise invalid_request("A content part must be an object.", param=param)
    kind = part.get("type")
    if kind == "input_text":
        return _cache_marks(part, {"type": "input_text", "text": _text(part, "text", param)})
    if text_only or kind not in ("input_image", "input_file"):
        allowed = "input_text" if text_only else "input_text, input_image, input_file"
        raise invalid_request(
            f"Unsupported content part type {kind!r} here; allowed: {allowed}.",
            param=f"{param}.type",
        )
    _no_file_id(part, param)
    if kind == "input_image":
        detail = part.get("detail")
        if detail is not None and detail not in _DETAILS:
            raise invalid_request(
                f"detail must be one of {', '.join(_DETAILS)}.", param=f"{param}.detail"
            )
        url = _str(part, "image_url", param)
        return _cache_marks(
            part, {"type": "input_image", "image_url": url, "detail": detail or "auto"}
        )
    out: Item = {"type": "input_file"}
    for key in ("file_data", "file_url", "filename"):
        value = _str(part, key, param, required=False)
        if value is not None:
            out[key] = value
    if "file_data" not in out and "file_url" not in out:
        raise invalid_request(
            "input_file needs file_data (a PDF data URL) or file_url.", param=f"{param}.file_data"
        )
    return _cache_marks(part, out)


def _no_file_id(part: Mapping[str, Any], param: str) -> None:
    if part.get("file_id") is not None and not (part.get("image_url") or part.get("file_data")):
        raise invalid_request(
            "file_id cannot be resolved: this gateway has no Files API. Send the content "
            "inline (a data URL) or by URL.",
            param=f"{param}.file_id",
        )


def _assistant_part(part: object, param: str) -> Item:
    if not isinstance(part, Mapping):
        raise invalid_request("A content part must be an object.", param=param)
    kind = part.get("type")
    if kind in ("output_text", "input_text"):
        text = _text(part, "text", param)
        annotations = part.get("annotations")
        return {
            "type": "output_text",
            "text": text,
            "annotations": annotations if isinstance(annotations, list) else [],
        }
    if kind == "refusal":
        return {"type": "refusal", "refusal": _text(part, "refusal", param)}
    raise invalid_request(
        f"Unsupported content part type {kind!r} in an assistant message; allowed: "
        "output_text, refusal.",
        param=f"{param}.type",
    )


# -- tool calls and reasoning ------------------------------------------------------------


def _function_call(raw: Mapping[str, Any], param: str) -> Item:
    arguments = raw.get("arguments")
    if not isinstance(arguments, str):
        raise invalid_request("arguments must be a JSON string.", param=f"{param}.arguments")
    item: Item = {
        "type": "function_call",
        "id": _id(raw, param, "fc"),
        "call_id": _str(raw, "call_id", param),
        "name": _str(raw, "name", param),
        "arguments": arguments,
        "status": _status(raw, param),
    }
    namespace = _str(raw, "namespace", param, required=False)
    if namespace:
        item["namespace"] = namespace
    return item


def _function_call_output(raw: Mapping[str, Any], param: str) -> Item:
    output = raw.get("output")
    where = f"{param}.output"
    if isinstance(output, list):
        output = [_input_part(part, f"{where}[{j}]", False) for j, part in enumerate(output)]
    elif not isinstance(output, str):
        raise invalid_request("output must be a string or an array of content parts.", param=where)
    return {
        "type": "function_call_output",
        "id": _id(raw, param, "fco"),
        "call_id": _str(raw, "call_id", param),
        "output": output,
        "status": _status(raw, param),
    }


def _reasoning(raw: Mapping[str, Any], param: str) -> Item:
    summary = raw.get("summary")
    if summary is None:
        summary = []
    if not isinstance(summary, list):
        raise invalid_request("summary must be an array.", param=f"{param}.summary")
    texts: list[Item] = []
    for j, part in enumerate(summary):
        where = f"{param}.summary[{j}]"
        if not isinstance(part, Mapping) or part.get("type") != "summary_text":
            raise invalid_request(
                'A summary part must be {"type": "summary_text", "text"}.', param=where
            )
        texts.append({"type": "summary_text", "text": _text(part, "text", where)})
    item: Item = {"type": "reasoning", "id": _id(raw, param, "rs"), "summary": texts}
    encrypted = _str(raw, "encrypted_content", param, required=False)
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    content = raw.get("content")
    if isinstance(content, list) and all(
        isinstance(c, Mapping)
        and c.get("type") == "reasoning_text"
        and isinstance(c.get("text"), str)
        for c in content
    ):  # raw reasoning text (another provider's); kept for listings, never sent upstream
        item["content"] = [{"type": "reasoning_text", "text": c["text"]} for c in content]
    return item
