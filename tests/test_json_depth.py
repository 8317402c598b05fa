"""The nesting check on JSON text: exact at the limit, blind to brackets inside strings."""

from __future__ import annotations

import json

import pytest

from trio_batcher.json_text import deeper_than


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("text", "limit", "deeper"),
    [
        (_nest(200), 200, False),
        (_nest(201), 200, True),
        ('{"a": {"b": [1, {"c": []}]}}', 5, False),
        ('{"a": {"b": [1, {"c": []}]}}', 4, True),
        (json.dumps({"text": "[" * 500}), 2, False),  # brackets in a string do not nest
        (json.dumps({"text": 'a \\" [[[ " ]', "x": [[[[1]]]]}), 4, True),  # escapes too
        (json.dumps(["[" * 10, "]" * 10, [[[]]]]), 4, False),
        ("[" + ",".join([_nest(5)] * 1000) + "]", 5, True),  # wide counts once
        ("[" + ",".join([_nest(5)] * 1000) + "]", 6, False),
        ("3", 0, False),
    ],
)
def test_depth_is_counted_on_the_text(text: str, limit: int, deeper: bool) -> None:
    json.loads(text)  # the check is only for valid JSON
    assert deeper_than(text, limit) is deeper
