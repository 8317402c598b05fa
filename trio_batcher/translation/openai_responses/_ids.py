"""Ids of responses and items, in OpenAI's spelling (``resp_…``, ``msg_…``, ``fc_…``, ``rs_…``).

A response's output item ids are derived from the response id and the item's position, so
that the reply and the stream of one response name its items alike and the codecs stay
pure (the caller supplies the response id). Input items the client sent without an id get
a random one: they are stored, listed and referenced by it.
"""

from __future__ import annotations

import secrets

__all__ = ["new_item_id", "new_response_id", "output_item_id"]


def new_response_id() -> str:
    """A fresh ``resp_…`` id (192 random bits, written as OpenAI's are: 48 hex digits)."""
    return "resp_" + secrets.token_hex(24)


def new_item_id(prefix: str) -> str:
    """A fresh item id such as ``msg_…`` for an input item that came without one."""
    return f"{prefix}_{secrets.token_hex(24)}"


def output_item_id(response_id: str, prefix: str, index: int) -> str:
    """The id of output item ``index`` of ``response_id``: unique because the response's is."""
    return f"{prefix}_{response_id.removeprefix('resp_')}{index:04x}"
