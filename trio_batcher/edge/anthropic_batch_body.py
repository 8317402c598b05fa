"""A Message Batch's create body, checked before it goes upstream; its results, tallied.

Why check here at all, when Anthropic checks too: the tenant rules need the body's models
before anything is sent (a tenant limited to some models must not get a batch of others
past the gateway), and a malformed envelope deserves a clear 400 naming the bad field
rather than a relayed refusal. Only the envelope is checked (``requests``, each one's
``custom_id`` and ``params.model``); the params themselves are Anthropic's to judge.

The tally reads a results body as it streams past (``ResultsTally.feed``), one JSONL line at
a time and never the whole body: the usage of each succeeded request, by model, which is
what the batch costs its owner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from ..errors import ProxyError
from .body import parse_json_body

__all__ = [
    "MAX_CREATE_BYTES",
    "BatchEnvelope",
    "ResultsTally",
    "check_envelope",
    "parse_create_body",
]

MAX_CREATE_BYTES: Final = 256 * 1024 * 1024  # Anthropic's limit for one batch's body
MAX_REQUESTS: Final = 100_000  # and for its requests
_CUSTOM_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A results line longer than this is relayed but not tallied (and the tally is then
# incomplete, so nothing is charged from it).
_MAX_LINE_BYTES: Final = 64 * 1024 * 1024
_USAGE_FIELDS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


@final
@dataclass(frozen=True, slots=True)
class BatchEnvelope:
    """What the gateway keeps of a create body: its models and how many requests."""

    models: tuple[str, ...]
    requests: int


def _invalid(message: str, param: str | None = None) -> ProxyError:
    return ProxyError(400, message, type="invalid_request_error", param=param)


def parse_create_body(raw: bytes) -> BatchEnvelope:
    """Parse and check a create body; CPU-bound for a large one (run it in a thread)."""
    return check_envelope(parse_json_body(raw))


def check_envelope(body: Any) -> BatchEnvelope:
    """The envelope's models and request count; ``ProxyError`` 400 naming the bad field."""
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object with a 'requests' list.")
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        raise _invalid("'requests' must be a non-empty list of requests.", "requests")
    if len(requests) > MAX_REQUESTS:
        raise _invalid(f"A batch holds at most {MAX_REQUESTS} requests.", "requests")
    models: dict[str, None] = {}
    seen: set[str] = set()
    for i, item in enumerate(requests):
        where = f"requests.{i}"
        if not isinstance(item, dict):
            raise _invalid(f"'{where}' must be an object with custom_id and params.", where)
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id):
            raise _invalid(
                f"'{where}.custom_id' must be 1 to 64 letters, digits, '_' or '-'.",
                f"{where}.custom_id",
            )
        if custom_id in seen:
            raise _invalid(
                f"'{where}.custom_id' repeats '{custom_id}': each must be unique in a batch.",
                f"{where}.custom_id",
            )
        seen.add(custom_id)
        params = item.get("params")
        if not isinstance(params, dict):
            raise _invalid(f"'{where}.params' must be a Messages request.", f"{where}.params")
        model = params.get("model")
        if not isinstance(model, str) or not model:
            raise _invalid(f"'{where}.params.model' must name a model.", f"{where}.params.model")
        models[model] = None
    return BatchEnvelope(tuple(models), len(requests))


@final
class ResultsTally:
    """The usage of a batch's succeeded requests, by model, read off its results JSONL."""

    def __init__(self) -> None:
        self.usage: dict[str, dict[str, int]] = {}
        self.requests: dict[str, int] = {}
        self.complete = True  # False once a line could not be read
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> None:
        """The next bytes of the body, cut anywhere."""
        pending = self._pending
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            self._line(bytes(pending[start:end]))
            start = end + 1
        del pending[:start]
        if len(pending) > _MAX_LINE_BYTES:
            self.complete = False
            pending.clear()

    def close(self) -> None:
        """The body ended: its last line, if it had no newline."""
        if self._pending.strip():
            self._line(bytes(self._pending))
        self._pending.clear()

    def _line(self, line: bytes) -> None:
        if not line.strip() or b'"succeeded"' not in line:
            return
        try:
            entry = json.loads(line)
        except ValueError:
            self.complete = False
            return
        result = entry.get("result") if isinstance(entry, dict) else None
        if not isinstance(result, dict) or result.get("type") != "succeeded":
            return
        message = result.get("message")
        if not isinstance(message, dict):
            return
        model = message.get("model")
        usage = message.get("usage")
        if not isinstance(model, str) or not isinstance(usage, Mapping):
            return
        total = self.usage.setdefault(model, dict.fromkeys(_USAGE_FIELDS, 0))
        for name in _USAGE_FIELDS:
            value = usage.get(name)
            if isinstance(value, int):
                total[name] += value
        self.requests[model] = self.requests.get(model, 0) + 1
