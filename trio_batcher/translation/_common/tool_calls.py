"""A tool call's id and its JSON arguments, as both dialects send them back.

Chat nests a call's arguments under ``function.arguments``, Responses writes ``arguments``
on the item; ``call_arguments`` takes the path and the name the client knows the field by.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

from ...errors import ProxyError, invalid_request
from ...json_text import MAX_JSON_DEPTH, deeper_than, lone_surrogate, strict_loads
from .content import is_blank

__all__ = ["call_arguments", "tool_use_id"]

_ID_UNSAFE: Final = re.compile(r"[^a-zA-Z0-9_-]")


def tool_use_id(raw: str) -> str:
    """An OpenAI tool call id made acceptable to Anthropic (``^[a-zA-Z0-9_-]+$``).

    OpenAI ids (``call_…``) pass unchanged; other clients' ids (``functions.get:0``) have the
    offending characters replaced, the same way on the call and on its result, plus a short
    digest of the original, so that two distinct ids (``call:1`` and ``call_1``) stay distinct.
    """
    safe = _ID_UNSAFE.sub("_", raw)
    if safe == raw:
        return raw
    return f"{safe}_{hashlib.blake2s(raw.encode(), digest_size=4).hexdigest()}"


def call_arguments(raw: object, param: str, name: str) -> dict[str, Any]:
    """A call's arguments (the field ``name``, at ``param``) as the ``input`` object.

    The same rules as the body they came in (``json_text``: strict JSON, bounded depth, no
    lone surrogates), since they are serialised again upstream; blank means no arguments.
    """
    if not isinstance(raw, str):
        raise invalid_request(f"{name} must be a JSON string.", param=param)
    if is_blank(raw):
        return {}
    try:
        value = strict_loads(raw)
    except ValueError:
        raise invalid_request(f"{name} is not valid JSON.", param=param) from None
    except RecursionError:
        raise _too_deep(param, name) from None
    if deeper_than(raw, MAX_JSON_DEPTH):
        raise _too_deep(param, name)
    if ("\\ud" in raw or "\\uD" in raw) and lone_surrogate(value) is not None:
        raise invalid_request(
            f"{name} contains an unpaired UTF-16 surrogate escape, which is not "
            "valid Unicode text.",
            param=param,
        )
    if not isinstance(value, dict):
        raise invalid_request(f"{name} must encode a JSON object.", param=param)
    return value


def _too_deep(param: str, name: str) -> ProxyError:
    return invalid_request(
        f"{name} is nested too deeply (more than {MAX_JSON_DEPTH} levels).", param=param
    )
