"""What the Quart routes of the stored objects (files, batches, a response's input items)
share: reading a page's ``limit`` and answering with JSON.

Each list has its own default and ceiling (OpenAI's: files list up to 10,000 at once,
batches and input items 20 by default and at most 100); the check and its message are one.
"""

from __future__ import annotations

import json
from typing import Any

from quart import Response

from ..errors import invalid_request

__all__ = ["json_response", "page_limit"]


def page_limit(raw: str | None, *, default: int, maximum: int) -> int:
    """The ``limit`` query parameter, ``default`` when absent.

    Raises:
      ProxyError: 400 naming ``limit`` for anything but an integer from 1 to ``maximum``.
    """
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= maximum:
        raise invalid_request(f"limit must be an integer from 1 to {maximum}.", param="limit")
    return limit


def json_response(body: Any) -> Response:
    """A 200 with ``body`` as compact JSON, non-ASCII text as UTF-8."""
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return Response(data, status=200, content_type="application/json")
