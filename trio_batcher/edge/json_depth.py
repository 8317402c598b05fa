"""How deep a JSON document nests, checked on its text without recursion.

Why: ``json.loads`` accepts nesting up to about Python's recursion limit, but the code that
walks or re-serialises the value later runs deeper in the stack and hits the limit first,
as a ``RecursionError`` far from the input. Servers check the depth once, at the door.

On the text rather than the decoded value: walking a value visits every container, which
for a body of many moderately deep ones (70,000 arrays 190 deep in 26 MB) took 20 s of
CPU; here the strings go and the brackets are counted by C loops (``re``, ``map``,
``accumulate``), about a second for the same body and microseconds for a chat request.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Final

_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET: Final = re.compile(r"[^\[\]{}]+")
_STEP: Final = {"[": 1, "{": 1, "]": -1, "}": -1}.__getitem__


def deeper_than(text: str, limit: int) -> bool:
    """Whether arrays and objects in the JSON ``text`` nest more than ``limit`` levels.

    ``text`` must be valid JSON (decode it first): brackets inside strings are skipped by
    matching whole strings, which is only right for well-formed ones.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # too few brackets to nest that deep (a chat request has a few dozen)
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP, brackets)), default=0) > limit
