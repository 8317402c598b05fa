"""The Messages body a cloud kind rewrites, parsed once by the gateway's strict rules.

Both cloud kinds move fields of the body (``model`` into the path, betas into it) and so
re-serialise it (``bedrock`` says why once is right); the client's bytes are parsed here
with ``json_text.strict_loads``, so that whatever passes is written back without loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ProxyError
from ...json_text import strict_loads

__all__ = ["parse_body"]


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
