"""The Messages body a cloud kind rewrites, parsed once by the gateway's strict rules.

Both cloud kinds move fields of the body (``model`` into the path, betas into it) and so
re-serialise it (``bedrock`` says why once is right); the client's bytes are parsed here
with ``json_text.strict_loads``, so that whatever passes is written back without loss.

That is CPU in proportion to the body (and Bedrock's SigV4 hashes it all once more): a
few microseconds for a chat turn, a large fraction of a second for an agent's 30 MB
conversation, which on the event loop would stall every other request of the process.
So a large body (``LARGE_BODY_BYTES``, the edge's own threshold for parsing off the loop)
is prepared in a worker thread (``prepared``), one at a time per client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import trio

from ...errors import ProxyError
from ...json_text import strict_loads

__all__ = ["LARGE_BODY_BYTES", "parse_body", "prepared", "source_of"]

T = TypeVar("T")

LARGE_BODY_BYTES: Final = 256 * 1024


def source_of(content: bytes | None, body: Mapping[str, Any]) -> Mapping[str, Any] | bytes:
    """The Messages body of a request: the client's bytes when the door kept them (its
    parsed ``body`` may then be only an outline, without the conversation), else ``body``."""
    return content if content is not None else body


async def prepared(
    source: Mapping[str, Any] | bytes, prepare: Callable[[], T], limiter: trio.CapacityLimiter
) -> T:
    """``prepare()``, in a worker thread (under ``limiter``) when ``source`` is bytes of a
    large body; on the loop otherwise (a parsed body was built on it, as it is sent for
    the Anthropic kind)."""
    if isinstance(source, Mapping) or len(source) < LARGE_BODY_BYTES:
        return prepare()
    return await trio.to_thread.run_sync(prepare, limiter=limiter)


def parse_body(body: Mapping[str, Any] | bytes) -> Mapping[str, Any]:
    """A Messages body as a mapping: bytes parsed by the gateway's strict rules.

    Raises:
      ProxyError: 400 ``invalid_json`` for bytes that are not a JSON object.
    """
    parsed: object = body
    if isinstance(body, bytes | bytearray):
        try:
            parsed = strict_loads(bytes(body).decode())
        except (ValueError, RecursionError) as exc:
            raise ProxyError(
                400,
                f"The request body is not valid JSON: {exc}.",
                type="invalid_request_error",
                code="invalid_json",
            ) from None
    if not isinstance(parsed, Mapping):
        raise ProxyError(
            400,
            "The request body must be a JSON object.",
            type="invalid_request_error",
            code="invalid_json",
        )
    return parsed
