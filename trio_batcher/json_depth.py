"""How deep a decoded JSON value nests, checked without recursion.

Why: ``json.loads`` accepts nesting up to about Python's recursion limit, but the code that
walks or re-serialises the value later runs deeper in the stack and hits the limit first,
as a ``RecursionError`` far from the input. Servers check the depth once, at the door.
"""

from __future__ import annotations

from typing import Any


def deeper_than(value: object, limit: int) -> bool:
    """Whether arrays and objects in ``value`` nest more than ``limit`` levels deep."""
    stack: list[tuple[dict[Any, Any] | list[Any], int]] = []
    if isinstance(value, dict | list):
        stack.append((value, 1))
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False
