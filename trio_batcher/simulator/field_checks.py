"""The vocabulary every request check shares: pydantic-worded field checks, dotted paths.

The real API is a pydantic model, so its refusals read like pydantic's ("Input should be a
valid string", "Extra inputs are not permitted", "Field required") and start with the
dotted path of the offending field. Every ``*_checks`` module speaks through these
helpers, so a message is worded once; ``Walk`` is the state one pass carries between them
(the request's betas and its ``cache_control`` breakpoints). ``validation.py`` is the face.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from .betas import beta_families
from .errors import SimulatorInvalidRequest


def fail(path: str, message: str) -> NoReturn:
    raise SimulatorInvalidRequest(f"{path}: {message}" if path else message)


def join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def as_object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        fail(path, "Input should be an object")
    return value


def as_list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        fail(path, "Input should be a valid list")
    return value


def as_string(value: object, path: str, *, non_empty: bool = False) -> str:
    if not isinstance(value, str):
        fail(path, "Input should be a valid string")
    if non_empty and not value:
        fail(path, "String should have at least 1 character")
    return value


def as_integer(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(path, "Input should be a valid integer")
    return value


def as_number(value: object, path: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        fail(path, "Input should be a valid number")
    if not low <= value <= high:
        fail(path, f"Input should be between {low:g} and {high:g}")
    return float(value)


def as_boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        fail(path, "Input should be a valid boolean")
    return value


def one_of(value: object, path: str, options: tuple[str, ...]) -> str:
    if value not in options:
        listed = ", ".join(repr(o) for o in options)
        fail(path, f"Input should be one of {listed}")
    return str(value)


def tagged(value: object, path: str, tags: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """An object whose ``type`` must be one of ``tags``: the object, and its tag."""
    obj = as_object(value, path)
    return obj, one_of(required(obj, "type", path), join(path, "type"), tags)


def only(obj: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            fail(join(path, key), "Extra inputs are not permitted")


def required(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        fail(join(path, key), "Field required")
    return obj[key]


def is_set(obj: Mapping[str, Any], key: str) -> bool:
    """True when an optional field is present and not ``null`` (null means "not set")."""
    return obj.get(key) is not None


class Walk:
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


def check_cache_control(value: object, path: str) -> None:
    control = as_object(value, path)
    only(control, frozenset({"type", "ttl"}), path)
    one_of(required(control, "type", path), join(path, "type"), ("ephemeral",))
    if is_set(control, "ttl"):
        one_of(control["ttl"], join(path, "ttl"), ("5m", "1h"))


def counted_cache_control(block: Mapping[str, Any], path: str, walk: Walk) -> None:
    """A block's (or a tool's) optional ``cache_control``: checked, and counted."""
    if is_set(block, "cache_control"):
        walk.breakpoints += 1
        check_cache_control(block["cache_control"], join(path, "cache_control"))
