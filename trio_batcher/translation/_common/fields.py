"""Reading a request's optional top-level fields, and recording what was dropped.

Every parameter module reads the client's JSON through these: ``null`` means "not set", as
OpenAI clients send it, and a value of the wrong type is a 400 naming the field. ``Ignored``
collects the parameters dropped without error for ``TranslatedRequest.ignored_params``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from ...errors import invalid_request

V = TypeVar("V")


def present(payload: Mapping[str, Any], key: str) -> bool:
    """OpenAI clients send ``null`` for "not set"; we read it the same way."""
    return payload.get(key) is not None


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def optional_int(payload: Mapping[str, Any], key: str, *, minimum: int) -> int | None:
    value = payload.get(key)
    if value is None:
        return None
    if not is_int(value) or value < minimum:
        raise invalid_request(f"{key} must be an integer ≥ {minimum}.", param=key)
    return int(value)


def optional_number(payload: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = payload.get(key)
    if value is None:
        return None
    if not is_number(value) or not low <= value <= high:
        raise invalid_request(f"{key} must be a number between {low:g} and {high:g}.", param=key)
    return value  # type: ignore[no-any-return]


def optional_bool(payload: Mapping[str, Any], key: str) -> bool | None:
    return _optional(payload, key, bool, "a boolean")


def optional_str(payload: Mapping[str, Any], key: str) -> str | None:
    return _optional(payload, key, str, "a string")


def _optional(payload: Mapping[str, Any], key: str, kind: type[V], noun: str) -> V | None:
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, kind):
        raise invalid_request(f"{key} must be {noun}.", param=key)
    return value


class Ignored:
    """Ordered, duplicate-free list of dropped parameter names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def add(self, name: str) -> None:
        if name not in self.names:
            self.names.append(name)
